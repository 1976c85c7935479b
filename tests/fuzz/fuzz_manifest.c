/*
 * fuzz_manifest.c - libFuzzer harness of the bundle-manifest reader: any
 * bytes are a bundle folder's manifest.json (written to a private temp
 * folder); opening may only succeed or fail with LG_ERR_SPEC or LG_ERR_IO,
 * never crash, hang or leak.
 *
 * An input whose first byte is 0 is amplified: the rest is a manifest
 * whose "kernels" list is rewritten large (2^(b % 17) records, b the second
 * byte, up to 16 MB of text) in one of three shapes (b >> 5 % 3): the list
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

#define AMPLIFIED_MAX ((size_t)16 << 20)

static char dir[64], path[96];

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The manifest of an amplified input, or NULL when the rest is not a
 * manifest with kernels (then the rest is used as it is). The records are
 * printed once and their text copied: the harness's own work stays small
 * next to the load it times. */
static char *amplify(const uint8_t *data, size_t size)
{
	if (size < 2)
		return NULL;
	cJSON *m = cJSON_ParseWithLength((const char *)data + 2, size - 2);
	cJSON *ks = cJSON_IsObject(m) ? cJSON_DetachItemFromObjectCaseSensitive(m, "kernels") : NULL;
	int n = cJSON_IsArray(ks) ? cJSON_GetArraySize(ks) : 0;
	char *head = n ? cJSON_PrintUnformatted(m) : NULL, **rec = n ? calloc((size_t)n, sizeof *rec) : NULL;
	size_t longest = 1;
	for (int i = 0; head && rec && i < n; i++) {
		rec[i] = cJSON_PrintUnformatted(cJSON_GetArrayItem(ks, i));
		LG_FUZZ_CHECK(rec[i] != NULL);
		longest = strlen(rec[i]) + 1 > longest ? strlen(rec[i]) + 1 : longest;
	}
	cJSON_Delete(ks);
	cJSON_Delete(m);
	if (!head || !rec) {
		free(head);
		free(rec);
		return NULL;
	}
	size_t want = (size_t)1 << (data[1] % 17);
	if (want * longest > AMPLIFIED_MAX)
		want = AMPLIFIED_MAX / longest + 1;
	int shape = (data[1] >> 5) % 3;
	if (shape == 2) /* the list, then its first record again */
		want = (size_t)n + 1;
	size_t hlen = strlen(head), cap = hlen + 16 + want * longest;
	char *out = malloc(cap), *o = out;
	LG_FUZZ_CHECK(out != NULL);
	memcpy(o, head, hlen - 1); /* without its closing brace */
	o += hlen - 1;
	o += sprintf(o, "%s\"kernels\":[", hlen > 2 ? "," : "");
	for (size_t i = 0; i < want; i++) {
		size_t r = shape == 0 ? i % (size_t)n : shape == 1 ? i * (size_t)n / want : i < (size_t)n ? i : 0;
		size_t len = strlen(rec[r]);
		LG_FUZZ_CHECK((size_t)(o - out) + len + 4 < cap);
		if (i)
			*o++ = ',';
		memcpy(o, rec[r], len);
		o += len;
	}
	memcpy(o, "]}", 3);
	for (int i = 0; i < n; i++)
		free(rec[i]);
	free(rec);
	free(head);
	return out;
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
