/*
 * target.c - compile targets ("sm_90a", "sm_80", ...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"

bool lg_target_parse(const char *name, struct lg_target *t)
{
	if (!name || strncmp(name, "sm_", 3) != 0)
		return false;
	const char *p = name + 3;
	int sm = 0, digits = 0;
	while (*p >= '0' && *p <= '9' && digits < 4) {
		sm = sm * 10 + (*p++ - '0');
		digits++;
	}
	if (digits < 2)
		return false;
	bool a = false;
	if (*p == 'a') {
		a = true;
		p++;
	}
	/* the "a" (arch-specific) targets begin with sm_90a: sm_80a, sm_89a are none */
	if (*p != '\0' || sm < 80 || sm > 1299 || (a && sm < 90))
		return false;
	memset(t, 0, sizeof *t);
	t->sm = sm;
	t->arch_specific = a;
	snprintf(t->name, sizeof t->name, "sm_%d%s", sm, a ? "a" : "");
	return true;
}
