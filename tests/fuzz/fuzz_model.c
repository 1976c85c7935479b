/*
 * fuzz_model.c - libFuzzer harness of model-config expansion: any bytes are
 * a model config; expansion may only succeed or report a spec error, and
 * the spec file it writes must parse, each kernel surviving the round trip.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *json = NULL;
	lg_status st = lg_model_expand_text((const char *)data, size, "model.json", &json);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_SPEC);
	if (st != LG_OK)
		return 0;
	lg_spec_file *f = NULL;
	LG_FUZZ_CHECK(lg_spec_file_parse(json, strlen(json), "expanded.json", &f) == LG_OK);
	for (size_t i = 0; i < lg_spec_file_count(f); i++)
		lg_fuzz_spec_roundtrip(lg_spec_file_get(f, i));
	lg_spec_file_free(f);
	free(json);
	return 0;
}
