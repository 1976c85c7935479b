/*
 * fuzz_manifest.c - libFuzzer harness of the bundle-manifest reader: any
 * bytes are a bundle folder's manifest.json (written to a private temp
 * folder); opening may only succeed or fail with LG_ERR_SPEC or LG_ERR_IO,
 * never crash, hang or leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "fuzz.h"

static char dir[64], path[96];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/lingen-fuzz-manifest-XXXXXX");
		LG_FUZZ_CHECK(mkdtemp(dir) != NULL);
		snprintf(path, sizeof path, "%s/manifest.json", dir);
	}
	FILE *fp = fopen(path, "wb");
	LG_FUZZ_CHECK(fp != NULL);
	LG_FUZZ_CHECK(fwrite(data, 1, size, fp) == size || size == 0);
	LG_FUZZ_CHECK(fclose(fp) == 0);
	lg_bundle *b = NULL;
	lg_status st = lg_bundle_open(dir, &b);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_SPEC || st == LG_ERR_IO);
	LG_FUZZ_CHECK((st == LG_OK) == (b != NULL));
	lg_bundle_free(b);
	return 0;
}
