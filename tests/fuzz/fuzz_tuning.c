/*
 * fuzz_tuning.c - libFuzzer harness of the tuning-file parser: any bytes are
 * an sm_90a tuning file; it may only parse or report a spec error, and a
 * file that parses must write text that parses to the same text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tuning.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lg_tuning *t = NULL, *u = NULL;
	lg_status st = lg_tuning_parse((const char *)data, size, "sm_90a.json", &t);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_SPEC);
	if (st != LG_OK)
		return 0;
	char *text = lg_tuning_to_json(t);
	LG_FUZZ_CHECK(text != NULL);
	LG_FUZZ_CHECK(lg_tuning_parse(text, strlen(text), "sm_90a.json", &u) == LG_OK);
	char *again = lg_tuning_to_json(u);
	LG_FUZZ_CHECK(again && strcmp(text, again) == 0);
	free(again);
	free(text);
	lg_tuning_free(u);
	lg_tuning_free(t);
	return 0;
}
