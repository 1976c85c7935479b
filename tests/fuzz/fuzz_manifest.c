/*
 * fuzz_manifest.c - libFuzzer harness of the bundle-manifest reader: any
 * bytes are a bundle folder's manifest.json (written to a private temp
 * folder); opening may only succeed or fail with LG_ERR_SPEC or LG_ERR_IO,
 * never crash, hang or leak.
 *
 * An input whose first byte is 0 is amplified: the rest is a manifest
 * whose "kernels" list is rewritten large (2^(b % 17) records, b the second
 * byte, up to 60 MB of text) in one of three shapes (b >> 5 % 3): the list
 * repeated, each record repeated in place, the list followed by one copy of
 * its first record; loading stayed quadratic in such lists. Every input
 * must load or be refused within LINGEN_FUZZ_MANIFEST_SECONDS (default 10)
 * seconds of wall time, however large.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bundle.h"
#include "fuzz.h"

#define AMPLIFIED_MAX ((size_t)60 << 20)

static char dir[64], path[96];

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The manifest of an amplified input, or NULL when the rest is not a
 * manifest with kernels (then the rest is used as it is). */
static char *amplify(const uint8_t *data, size_t size)
{
	if (size < 2)
		return NULL;
	cJSON *m = cJSON_ParseWithLength((const char *)data + 2, size - 2);
	cJSON *ks = cJSON_GetObjectItemCaseSensitive(m, "kernels");
	int n = cJSON_IsArray(ks) ? cJSON_GetArraySize(ks) : 0;
	char *list = n ? cJSON_PrintUnformatted(ks) : NULL;
	if (!list) {
		cJSON_Delete(m);
		return NULL;
	}
	size_t per = strlen(list) / (size_t)n + 1, want = (size_t)1 << (data[1] % 17);
	if (want * per > AMPLIFIED_MAX)
		want = AMPLIFIED_MAX / per;
	free(list);
	cJSON **orig = calloc((size_t)n, sizeof *orig);
	LG_FUZZ_CHECK(orig != NULL);
	for (int i = 0; i < n; i++)
		orig[i] = cJSON_DetachItemFromArray(ks, 0);
	int shape = (data[1] >> 5) % 3;
	for (size_t i = 0; i < want; i++) {
		const cJSON *src = shape == 0 ? orig[i % (size_t)n]
				 : shape == 1 ? orig[(i * (size_t)n / want) % (size_t)n]
					      : orig[i < (size_t)n ? i : 0];
		LG_FUZZ_CHECK(cJSON_AddItemToArray(ks, cJSON_Duplicate(src, true)));
		if (shape == 2 && i >= (size_t)n)
			break;
	}
	for (int i = 0; i < n; i++)
		cJSON_Delete(orig[i]);
	free(orig);
	char *text = cJSON_PrintUnformatted(m);
	cJSON_Delete(m);
	return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static double bound;
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/lingen-fuzz-manifest-XXXXXX");
		LG_FUZZ_CHECK(mkdtemp(dir) != NULL);
		snprintf(path, sizeof path, "%s/manifest.json", dir);
		const char *e = getenv("LINGEN_FUZZ_MANIFEST_SECONDS");
		bound = e && atof(e) > 0 ? atof(e) : 10.0;
	}
	char *big = size && data[0] == 0 ? amplify(data, size) : NULL;
	const void *bytes = big ? big : (const void *)data;
	size_t n = big ? strlen(big) : size;
	FILE *fp = fopen(path, "wb");
	LG_FUZZ_CHECK(fp != NULL);
	LG_FUZZ_CHECK(fwrite(bytes, 1, n, fp) == n || n == 0);
	LG_FUZZ_CHECK(fclose(fp) == 0);
	free(big);
	lg_bundle *b = NULL;
	double t0 = now_s();
	lg_status st = lg_bundle_open(dir, &b);
	double t = now_s() - t0;
	if (t > bound)
		fprintf(stderr, "fuzz_manifest: %zu bytes took %.2f s, bound %.2f s\n", n, t, bound);
	LG_FUZZ_CHECK(t <= bound);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_SPEC || st == LG_ERR_IO);
	LG_FUZZ_CHECK((st == LG_OK) == (b != NULL));
	lg_bundle_free(b);
	return 0;
}
