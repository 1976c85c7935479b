/*
 * fuzz_index.c - libFuzzer harness of the bundle-index reader: any bytes
 * are a bundle folder's index.lgb, in a private temp folder holding a real
 * bundle's other files (cubins.lgc and the cubins' own files, copied from
 * $LINGEN_FUZZ_BUNDLE when set: tools/fuzz.sh builds one), so the offsets,
 * sizes and file names of the input point into real files. Opening may
 * only succeed or fail with LG_ERR_SPEC or LG_ERR_IO; when it succeeds,
 * each kernel line's spec (its last field) is looked up for its arch, and
 * a lookup may only succeed, with every byte of the cubin readable, or fail
 * with LG_ERR_MISSING, LG_ERR_SPEC or LG_ERR_IO. Never a crash, a read
 * past the mapping, a hang or a leak.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "fuzz.h"

#define LOOKUPS_MAX 64 /* kernel lines looked up an input */

static char dir[64], path[96];
static volatile unsigned char sink; /* what the read of a served cubin made */

static void copy_file(const char *from_dir, const char *name)
{
	char from[4096], to[4096];
	snprintf(from, sizeof from, "%s/%s", from_dir, name);
	snprintf(to, sizeof to, "%s/%s", dir, name);
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
	LG_FUZZ_CHECK(in && out);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		LG_FUZZ_CHECK(fwrite(buf, 1, n, out) == n);
	fclose(in);
	LG_FUZZ_CHECK(fclose(out) == 0);
}

/* The temp folder, with the seed bundle's files but its index. */
static void init(void)
{
	snprintf(dir, sizeof dir, "/tmp/lingen-fuzz-index-XXXXXX");
	LG_FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof path, "%s/index.lgb", dir);
	const char *seed = getenv("LINGEN_FUZZ_BUNDLE");
	DIR *d = seed ? opendir(seed) : NULL;
	if (seed && !d)
		fprintf(stderr, "fuzz_index: $LINGEN_FUZZ_BUNDLE=%s is not a folder: fuzzing without cubins\n", seed);
	for (struct dirent *e; d && (e = readdir(d));)
		if (e->d_name[0] != '.' && strcmp(e->d_name, "index.lgb") != 0 && strcmp(e->d_name, "manifest.json") != 0)
			copy_file(seed, e->d_name);
	if (d)
		closedir(d);
}

/* Look up the spec of one kernel line (fields cut at tabs: arch is the
 * second, the spec the last). */
static void lookup(const lg_bundle *b, char *line)
{
	char *arch = strchr(line, '\t'), *spec = strrchr(line, '\t');
	if (!arch || spec == arch)
		return;
	arch++;
	char *end = strchr(arch, '\t');
	*end = '\0';
	lg_spec *s = NULL;
	struct lg_target t;
	if (!lg_target_parse(arch, &t) || lg_spec_parse(spec + 1, &s) != LG_OK) {
		lg_spec_free(s);
		return;
	}
	char *canon = lg_spec_canonical(s);
	LG_FUZZ_CHECK(canon != NULL);
	struct lg_plan plan;
	const void *cubin = NULL;
	struct lg_blob owned = {0};
	size_t size = 0;
	lg_status st = lg_bundle_get(b, s, canon, &t, &plan, &cubin, &size, &owned);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_MISSING || st == LG_ERR_SPEC || st == LG_ERR_IO);
	LG_FUZZ_CHECK(st == LG_OK || !owned.base);
	if (st == LG_OK) {
		unsigned char sum = 0; /* every byte readable (ASan, or SIGBUS past a mapping) */
		for (size_t i = 0; i < size; i++)
			sum ^= ((const unsigned char *)cubin)[i];
		sink = sum;
		LG_FUZZ_CHECK(!owned.base || (owned.base == cubin && !owned.mapped));
	}
	lg_blob_release(&owned);
	free(canon);
	lg_spec_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0])
		init();
	FILE *fp = fopen(path, "wb");
	LG_FUZZ_CHECK(fp != NULL);
	LG_FUZZ_CHECK(fwrite(data, 1, size, fp) == size || size == 0);
	LG_FUZZ_CHECK(fclose(fp) == 0);
	lg_bundle *b = NULL;
	lg_status st = lg_bundle_open(dir, &b);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_SPEC || st == LG_ERR_IO);
	LG_FUZZ_CHECK((st == LG_OK) == (b != NULL));
	if (b) {
		char *text = malloc(size + 1);
		LG_FUZZ_CHECK(text != NULL);
		memcpy(text, data, size);
		text[size] = '\0';
		int n = 0;
		for (char *line = text, *next; line && n < LOOKUPS_MAX; line = next) {
			next = strchr(line, '\n');
			if (next)
				*next++ = '\0';
			if (strncmp(line, "kernel\t", 7) == 0 && ++n)
				lookup(b, line);
		}
		free(text);
	}
	lg_bundle_free(b);
	return 0;
}
