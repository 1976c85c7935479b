/*
 * templates.c - lookup and pasting of the embedded templates/<name>.cuh.
 */
#include "templates.h"

#include <string.h>

#include "error.h"

const struct lg_template *lg_template_get(const char *name)
{
	for (size_t i = 0; i < lg_template_count; i++)
		if (strcmp(lg_templates[i].name, name) == 0)
			return &lg_templates[i];
	LG_ASSERT(!"unknown template");
}

void lg_emit_template(lg_buf *b, const char *name)
{
	const struct lg_template *t = lg_template_get(name);
	lg_emit(b, "// ---- templates/%s.cuh ----\n", name);
	lg_raw(b, t->text, t->len);
	if (t->len && t->text[t->len - 1] != '\n')
		lg_raw(b, "\n", 1);
	lg_raw(b, "\n", 1);
}
