/*
 * fuzz_spec.c - libFuzzer harness of the spec-file parser: any bytes are
 * parsed as a spec file; the parser may only succeed or report a spec
 * error, and every spec it accepts must give canonical JSON that parses
 * back to itself and plans for sm_90a (tools/fuzz.sh runs it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "generate.h"
#include "lingen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	lg_spec_file *f = NULL;
	lg_status st = lg_spec_file_parse((const char *)data, size, "fuzz.json", &f);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_SPEC);
	LG_FUZZ_CHECK((st == LG_OK) == (f != NULL));
	for (size_t i = 0; i < lg_spec_file_count(f); i++)
		lg_fuzz_spec_roundtrip(lg_spec_file_get(f, i));
	lg_spec_file_free(f);
	return 0;
}
