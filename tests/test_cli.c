/*
 * test_cli.c - the `lingen` command-line tool, run as a program: help and
 * usage errors, gen, build (bundle + manifest), cache ls/clear/verify,
 * expand (model configs, also taken by every command that takes a spec),
 * check without a GPU, and bench --jit (compile and cache read need none). Exit statuses: 0 ok, 1 failed/runtime, 2 usage/input.
 *
 * Needs NVRTC (for build) but no GPU. Each test uses its own temp folders
 * and its own LINGEN_CACHE_DIR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bundle.h"
#include "lingen.h"
#include "proc.h"
#include "testutil.h"

#define NORMS LG_SOURCE_DIR "/configs/kernels/ling-mini-2.0-norms.json"
#define LING_MINI LG_SOURCE_DIR "/configs/models/ling-mini-2.0.json"

/* Run the CLI with up to 14 arguments (NULL-terminated) and an optional
 * cache folder, print the command, its status and stderr (shown when the
 * test fails), and assert the exit status is `want`. */
static struct lg_proc vcli(int want, const char *cache, va_list ap)
{
	char *argv[16] = {(char *)LG_CLI};
	int n = 1;
	for (const char *s; n < 15 && (s = va_arg(ap, const char *));)
		argv[n++] = (char *)s;
	char *envvar = NULL;
	char *env[2] = {NULL, NULL};
	if (cache) {
		assert_true(asprintf(&envvar, "LINGEN_CACHE_DIR=%s", cache) > 0);
		env[0] = envvar;
	}
	struct lg_proc p;
	assert_int_equal(lg_proc_run(argv, env, &p), 0);
	free(envvar);
	fprintf(stderr, "$ lingen");
	for (int i = 1; i < n; i++)
		fprintf(stderr, " %s", argv[i]);
	fprintf(stderr, "  -> %d\n%s", p.status, p.err);
	if (want >= 0) /* -1: any */
		assert_int_equal(p.status, want);
	return p;
}

/* The run, for a test that looks at its output; free with lg_proc_free. */
static struct lg_proc cli(int want, const char *cache, ...)
{
	va_list ap;
	va_start(ap, cache);
	struct lg_proc p = vcli(want, cache, ap);
	va_end(ap);
	return p;
}

/* A run whose exit status is all that matters. */
static void run(int want, const char *cache, ...)
{
	va_list ap;
	va_start(ap, cache);
	struct lg_proc p = vcli(want, cache, ap);
	va_end(ap);
	lg_proc_free(&p);
}

static void test_help(void **state)
{
	(void)state;
	struct lg_proc p = cli(0, NULL, "--help", NULL);
	static const char *const cmds[] = {"gen", "build", "check", "bench", "cache", "expand"};
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		assert_non_null(strstr(p.out, cmds[i]));
	lg_proc_free(&p);

	p = cli(0, NULL, "help", "build", NULL);
	assert_non_null(strstr(p.out, "--arch"));
	lg_proc_free(&p);

	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		p = cli(0, NULL, cmds[i], "--help", NULL);
		assert_non_null(strstr(p.out, "usage: lingen"));
		lg_proc_free(&p);
	}

	p = cli(0, NULL, "--version", NULL);
	assert_non_null(strstr(p.out, LINGEN_VERSION));
	lg_proc_free(&p);
}

static void test_usage_errors(void **state)
{
	(void)state;
	struct lg_proc p = cli(2, NULL, "frobnicate", NULL);
	assert_non_null(strstr(p.err, "frobnicate"));
	lg_proc_free(&p);

	run(2, NULL, NULL); /* no command */

	p = cli(2, NULL, "gen", "--bogus", NORMS, NULL);
	assert_non_null(strstr(p.err, "--bogus"));
	lg_proc_free(&p);

	run(2, NULL, "gen", NULL);
	run(2, NULL, "cache", "dance", NULL);
	run(2, NULL, "help", "nosuch", NULL);
}

static void test_gen(void **state)
{
	(void)state;
	struct lg_proc p = cli(0, NULL, "gen", NORMS, NULL);
	assert_non_null(strstr(p.out, "extern \"C\" __global__"));
	assert_non_null(strstr(p.out, "generated, do not edit"));
	lg_proc_free(&p);

	/* -o DIR: one <entry>.cu per kernel, the same text as stdout */
	char *dir = lg_test_tmpdir("cli-gen");
	run(0, NULL, "gen", NORMS, "-o", dir, "--arch", "sm_80", NULL);
	lg_spec_file *f;
	assert_int_equal(lg_spec_file_load(NORMS, &f), LG_OK);
	for (size_t i = 0; i < lg_spec_file_count(f); i++) {
		char *path;
		assert_true(asprintf(&path, "%s/%s.cu", dir, lg_spec_entry(lg_spec_file_get(f, i))) > 0);
		char *text = lg_test_read_file(path, NULL);
		assert_non_null(text);
		assert_non_null(strstr(text, "generated, do not edit"));
		free(text);
		free(path);
	}
	lg_spec_file_free(f);
	lg_test_rm_rf(dir);
	free(dir);
}

static void test_gen_bad_input(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cli-bad");
	char *bad = lg_test_path(dir, "bad-spec.json");
	static const char bad_spec[] = "{ \"kernels\": [ { \"op\": \"rmsnorm\", \"pass\": \"forward\", "
				       "\"dtype\": \"bf16\", \"hidden\": 100, \"eps\": 1e-6 } ] }\n";
	lg_test_write_file(bad, bad_spec, sizeof bad_spec - 1);
	struct lg_proc p = cli(2, NULL, "gen", bad, NULL);
	assert_non_null(strstr(p.err, "bad-spec.json"));
	assert_non_null(strstr(p.err, "kernels[0].hidden"));
	lg_proc_free(&p);

	/* a number the kernel would hold as 0 in fp32: refused with the path,
	 * by gen as by build (it generated, then NVRTC refused "5e-324f") */
	static const char tiny[] = "{\"kernels\": [{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				   "\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"mscale\": 5e-324}]}";
	lg_test_write_file(bad, tiny, sizeof tiny - 1);
	p = cli(2, NULL, "gen", bad, NULL);
	assert_non_null(strstr(p.err, "bad-spec.json: kernels[0].mscale: found 5e-324"));
	lg_proc_free(&p);
	run(2, NULL, "build", bad, "--arch", "sm_80", "-o", dir, NULL);
	char *model = lg_test_path(dir, "model.json"), *text = lg_test_read_file(LING_MINI, NULL);
	assert_non_null(text);
	char *eps = strstr(text, "\"eps\": 1e-6");
	assert_non_null(eps);
	size_t at = (size_t)(eps - text) + strlen("\"eps\": ");
	char *edited;
	assert_true(asprintf(&edited, "%.*s5e-324%s", (int)at, text, text + at + strlen("1e-6")) > 0);
	lg_test_write_file(model, edited, strlen(edited));
	p = cli(2, NULL, "expand", model, NULL);
	assert_non_null(strstr(p.err, "model.json: eps: found 5e-324"));
	lg_proc_free(&p);
	free(edited);
	free(text);
	free(model);

	char *missing = lg_test_path(dir, "no-such-spec.json");
	p = cli(2, NULL, "gen", missing, NULL);
	assert_non_null(strstr(p.err, "no-such-spec.json"));
	lg_proc_free(&p);

	run(2, NULL, "build", missing, "-o", dir, NULL);

	/* a FIFO given as a spec is refused at once, not waited on */
	char *fifo = lg_test_path(dir, "spec.fifo");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	p = cli(2, NULL, "gen", fifo, NULL);
	assert_non_null(strstr(p.err, "spec.fifo: is a FIFO, not a regular file"));
	lg_proc_free(&p);
	free(fifo);

	free(missing);
	free(bad);
	lg_test_rm_rf(dir);
	free(dir);
}

static bool file_size(const char *path, long long *size)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return false;
	*size = st.st_size;
	return true;
}

/* Every kernel x arch is in the manifest, with a file of the stated size
 * and checksum. */
static void check_manifest(const char *dir, const char *const *archs, int narch)
{
	char *path = lg_test_path(dir, "manifest.json");
	char *text = lg_test_read_file(path, NULL);
	assert_non_null(text);
	cJSON *m = cJSON_Parse(text);
	assert_non_null(m);
	assert_true(cJSON_IsString(cJSON_GetObjectItem(m, "lingen")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(m, "nvrtc")));
	cJSON *ks = cJSON_GetObjectItem(m, "kernels");
	assert_true(cJSON_IsArray(ks));

	lg_spec_file *f;
	assert_int_equal(lg_spec_file_load(NORMS, &f), LG_OK);
	size_t nk = lg_spec_file_count(f);
	assert_int_equal(cJSON_GetArraySize(ks), (int)(nk * (size_t)narch));
	for (size_t i = 0; i < nk; i++) {
		const char *entry = lg_spec_entry(lg_spec_file_get(f, i));
		for (int a = 0; a < narch; a++) {
			bool found = false;
			cJSON *k;
			cJSON_ArrayForEach(k, ks)
			{
				const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(k, "entry"));
				const char *ar = cJSON_GetStringValue(cJSON_GetObjectItem(k, "arch"));
				if (!e || !ar || strcmp(e, entry) || strcmp(ar, archs[a]))
					continue;
				found = true;
				assert_true(cJSON_IsObject(cJSON_GetObjectItem(k, "spec")));
				const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(k, "file"));
				assert_non_null(file);
				char *cubin = lg_test_path(dir, file);
				long long size;
				assert_true(file_size(cubin, &size));
				assert_true(size > 0);
				assert_int_equal(size, (long long)cJSON_GetNumberValue(
							       cJSON_GetObjectItem(k, "size")));
				size_t n;
				char *data = lg_test_read_file(cubin, &n);
				assert_non_null(data);
				char sum[17];
				char *canon = lg_spec_canonical(lg_spec_file_get(f, i));
				char *given = cJSON_PrintUnformatted(
					cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "given"));
				snprintf(sum, sizeof sum, "%016llx",
					 (unsigned long long)lg_bundle_checksum(canon, entry, archs[a], given, data, n));
				free(given);
				free(canon);
				assert_string_equal(sum, cJSON_GetStringValue(
								 cJSON_GetObjectItem(k, "checksum")));
				free(data);
				free(cubin);
			}
			assert_true(found);
		}
	}
	lg_spec_file_free(f);
	cJSON_Delete(m);
	free(text);
	free(path);
}

static void test_build(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cli-build");
	char *out = lg_test_path(dir, "bundle/a"), *cache = lg_test_path(dir, "cache");
	struct lg_proc p = cli(0, cache, "build", NORMS, "--arch", "sm_90a,sm_80", "-o", out, "-j", "2",
			       NULL);
	assert_non_null(strstr(p.err, "built "));
	lg_proc_free(&p);
	static const char *const archs[] = {"sm_90a", "sm_80"};
	check_manifest(out, archs, 2);

	/* again, from the disk cache: same result */
	run(0, cache, "build", NORMS, "--arch=sm_90a,sm_80", "-o", out, NULL);
	check_manifest(out, archs, 2);

	/* into the same folder for one arch: the other arch's cubins go, a
	 * file that is not lingen's stays */
	char *mine = lg_test_path(out, "notes.cubin");
	lg_test_write_file(mine, "x", 1);
	run(0, cache, "build", NORMS, "--arch", "sm_90a", "-o", out, NULL);
	check_manifest(out, archs, 1);
	size_t ncubins = 0;
	char **cubins = lg_test_list_dir(out, ".cubin", &ncubins);
	assert_non_null(cubins);
	assert_true(ncubins >= 2);
	for (size_t i = 0; i < ncubins; i++)
		assert_true(strstr(cubins[i], ".sm_90a.cubin") || strstr(cubins[i], "notes.cubin"));
	lg_test_free_list(cubins);
	char *kept = lg_test_read_file(mine, NULL);
	assert_non_null(kept);
	free(kept);
	free(mine);
	run(0, cache, "build", NORMS, "--arch=sm_90a,sm_80", "-o", out, NULL);
	check_manifest(out, archs, 2);

	p = cli(2, cache, "build", NORMS, "--arch", "sm_7x", "-o", out, NULL);
	assert_non_null(strstr(p.err, "sm_7x"));
	lg_proc_free(&p);
	/* no arch-specific target below sm_90a, nor one NVRTC does not know: exit 2, before NVRTC */
	const char *no_such[] = {"sm_80a", "sm_89a", "sm_86a", "sm_95a"};
	for (size_t i = 0; i < sizeof no_such / sizeof *no_such; i++) {
		p = cli(2, cache, "build", NORMS, "--arch", no_such[i], "-o", out, NULL);
		assert_non_null(strstr(p.err, no_such[i]));
		assert_non_null(strstr(p.err, "sm_<NN>a with NN >= 90"));
		assert_null(strstr(p.err, "nv_arch"));
		if (!strstr(p.err, "this NVRTC"))
			print_message("note: no NVRTC here to list its arches\n");
		lg_proc_free(&p);
	}

	run(2, cache, "build", NORMS, "--arch", "sm_90a", NULL); /* no -o */

	/* a tile this arch cannot take is bad input: exit 2, file and path */
	char *fused = lg_test_path(dir, "fused.json");
	const char *fj = "{\"kernels\": [{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": "
			 "\"bf16\", \"hidden\": 2048, \"quant\": {}, \"tile\": {\"cluster\": 16}}]}";
	lg_test_write_file(fused, fj, strlen(fj));
	p = cli(2, cache, "build", fused, "--arch", "sm_80", "-o", out, NULL);
	assert_non_null(strstr(p.err, "fused.json: kernels[0]"));
	assert_non_null(strstr(p.err, "tile.cluster: found 16, allowed for sm_80: 1"));
	lg_proc_free(&p);
	free(fused);
	run(2, cache, "build", NORMS, "-o", out, "-j", "zero", NULL);

	free(out);
	free(cache);
	lg_test_rm_rf(dir);
	free(dir);
}

/* Flip bytes in the middle of the first cache entry in dir. */
static void corrupt_one(const char *dir)
{
	size_t count = 0, n = 0;
	char **files = lg_test_list_dir(dir, ".lgc", &count);
	assert_non_null(files);
	assert_true(count > 0);
	char *data = lg_test_read_file(files[0], &n);
	assert_non_null(data);
	assert_true(n > 64);
	for (size_t i = n / 2; i < n / 2 + 8; i++)
		data[i] = (char)~data[i];
	lg_test_write_file(files[0], data, n);
	free(data);
	lg_test_free_list(files);
}

static void test_cache(void **state)
{
	/* a --dir that does not exist is bad input, not an empty cache */
	struct lg_proc nd = cli(2, NULL, "cache", "ls", "--dir", "/nonexistent-lingen-cache", NULL);
	assert_non_null(strstr(nd.err, "--dir /nonexistent-lingen-cache: No such file or directory"));
	assert_null(strstr(nd.out, "0 entries"));
	lg_proc_free(&nd);
	(void)state;
	char *dir = lg_test_tmpdir("cli-cache");
	char *out = lg_test_path(dir, "bundle"), *cache = lg_test_path(dir, "cache");

	run(0, cache, "cache", "ls", NULL);
	run(0, cache, "build", NORMS, "--arch", "sm_90a", "-o", out, NULL);
	struct lg_proc p = cli(0, cache, "cache", "ls", NULL);
	assert_non_null(strstr(p.out, "sm_90a"));
	lg_proc_free(&p);

	run(0, cache, "cache", "verify", NULL);

	/* --dir names the same folder explicitly */
	run(0, NULL, "cache", "verify", "--dir", cache, NULL);

	/* the reproducer: one byte of the stored entry name
	 * (printf X | dd of=ENTRY.lgc bs=1 seek=52 conv=notrunc) */
	char *sh;
	assert_true(asprintf(&sh, "for f in '%s'/*.lgc; do printf X | dd of=\"$f\" bs=1 seek=52 conv=notrunc 2>/dev/null; done",
			     cache) > 0);
	assert_int_equal(system(sh), 0);
	free(sh);
	p = cli(1, cache, "cache", "verify", NULL);
	assert_non_null(strstr(p.err, "checksum mismatch"));
	assert_non_null(strstr(p.out, "0 of "));
	lg_proc_free(&p);
	run(0, cache, "build", NORMS, "--arch", "sm_90a", "-o", out, NULL); /* misses: written again */
	run(0, cache, "cache", "verify", NULL);

	corrupt_one(cache);
	p = cli(1, cache, "cache", "verify", NULL);
	assert_true(strlen(p.err) > 0);
	lg_proc_free(&p);

	run(0, cache, "cache", "prune", "--max-mb", "0", NULL);
	run(0, cache, "cache", "clear", NULL);
	run(0, cache, "cache", "verify", NULL);

	p = cli(0, cache, "cache", "ls", NULL);
	assert_null(strstr(p.out, "sm_90a"));
	lg_proc_free(&p);

	free(out);
	free(cache);
	lg_test_rm_rf(dir);
	free(dir);
}

/* Output that cannot be written (stdout on a full device, -o naming one)
 * is a failure, exit 1 with the reason; a device named by -o stays a device. */
static void test_write_errors(void **state)
{
	(void)state;
	struct stat st;
	if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode))
		skip(); /* no /dev/full here */
	static const char *const cmds[] = {
		"gen " NORMS, "expand " LG_SOURCE_DIR "/configs/models/ling-mini-2.0.json", "env", "help",
		"--help", "--version", "help rmsnorm_quant", "cache ls", "cache verify",
	};
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		char *line;
		assert_true(asprintf(&line, "LINGEN_CACHE_DIR=off exec %s %s > /dev/full", LG_CLI, cmds[i]) > 0);
		char *argv[] = {(char *)"/bin/sh", (char *)"-c", line, NULL};
		struct lg_proc p;
		assert_int_equal(lg_proc_run(argv, NULL, &p), 0);
		if (p.status != 1 || !strstr(p.err, "cannot write the output"))
			fail_msg("lingen %s > /dev/full: exit %d, stderr: %s", cmds[i], p.status, p.err);
		lg_proc_free(&p);
		free(line);
	}
	struct lg_proc p = cli(1, NULL, "expand", LG_SOURCE_DIR "/configs/models/ling-mini-2.0.json", "-o",
			       "/dev/full", NULL);
	assert_non_null(strstr(p.err, "/dev/full: No space left on device"));
	assert_null(strstr(p.err, "wrote"));
	lg_proc_free(&p);
	assert_int_equal(stat("/dev/full", &st), 0);
	assert_true(S_ISCHR(st.st_mode)); /* written in place, never replaced by a rename */
}

static void test_check_without_gpu(void **state)
{
	(void)state;
	if (access("/dev/nvidiactl", F_OK) == 0) {
		print_message("skipped: a GPU machine, where check really runs (the gpu tests cover it)\n");
		skip();
	}
	struct lg_proc p = cli(1, NULL, "check", NORMS, "--tokens", "256", NULL);
	assert_true(strlen(p.err) > 0);
	assert_non_null(strstr(p.err, "GPU"));
	assert_null(strstr(p.err, "pass one, e.g. --arch")); /* check takes no --arch */
	lg_proc_free(&p);

	run(2, NULL, "check", NORMS, "--tokens", "0", NULL);
}

/* --tokens is read one strict way: an empty value, an empty item, a space
 * before or after a number are all usage errors (exit 2) naming what was
 * found ("" meant 8192 and " 5" was 5, while "1," and "5 " were refused). */
static void test_tokens_strict(void **state)
{
	(void)state;
	static const char *const bad[] = {"", "1,", ",1", " 5", "5 ", "5,,6", "+5", "0x10", "1e3"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct lg_proc p = cli(2, NULL, "check", NORMS, "--tokens", bad[i], NULL);
		assert_non_null(strstr(p.err, "--tokens: found '"));
		assert_non_null(strstr(p.err, "expected an integer from 1 to"));
		lg_proc_free(&p);
	}
}

/* LINGEN_TUNING naming a file that cannot be read (missing, a FIFO, over
 * the 16 MiB input bound) is bad input as such a spec is: exit 2 naming
 * the file (it was 1, a failed run). */
static void test_tuning_unreadable(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cli-tuning");
	char *fifo = lg_test_path(dir, "fifo"), *big = lg_test_path(dir, "big.json");
	char *missing = lg_test_path(dir, "missing.json"), *out = lg_test_path(dir, "out");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	size_t n = (size_t)17 << 20;
	char *zeros = calloc(1, n);
	assert_non_null(zeros);
	lg_test_write_file(big, zeros, n);
	free(zeros);
	const char *files[] = {missing, fifo, big}, *why[] = {"No such file", "FIFO", "larger than 16 MiB"};
	for (int i = 0; i < 3; i++) {
		for (int t = 0; t < 2; t++) { /* the file as the spec, then as the tuning file */
			char *env[3] = {NULL, NULL, NULL}, *cache = lg_test_path(dir, "cache");
			assert_true(asprintf(&env[0], "LINGEN_CACHE_DIR=%s", cache) > 0);
			assert_true(asprintf(&env[1], "LINGEN_TUNING=%s", t ? files[i] : "off") > 0);
			char *argv[] = {(char *)LG_CLI, (char *)"build", (char *)(t ? NORMS : files[i]),
					(char *)"--arch", (char *)"sm_80", (char *)"-o", out, NULL};
			struct lg_proc p;
			assert_int_equal(lg_proc_run(argv, env, &p), 0);
			fprintf(stderr, "%s %s -> %d\n%s", t ? "tuning" : "spec", files[i], p.status, p.err);
			assert_int_equal(p.status, 2);
			assert_non_null(strstr(p.err, files[i]));
			assert_non_null(strstr(p.err, why[i]));
			lg_proc_free(&p);
			free(env[0]);
			free(env[1]);
			free(cache);
		}
	}
	lg_test_rm_rf(dir);
	free(out);
	free(missing);
	free(big);
	free(fifo);
	free(dir);
}

/* check's seed: --seed or LINGEN_SEED, checked before any GPU work (bad
 * values are usage errors, exit 2); the help says where it comes from. */
static void test_check_seed(void **state)
{
	(void)state;
	struct lg_proc p = cli(2, NULL, "check", NORMS, "--seed", "x", NULL);
	assert_non_null(strstr(p.err, "--seed"));
	lg_proc_free(&p);
	run(2, NULL, "check", NORMS, "--seed", "-1", NULL);
	char *const argv[] = {(char *)LG_CLI, (char *)"check", (char *)NORMS, NULL};
	char *const env[] = {(char *)"LINGEN_SEED=12x", NULL};
	assert_int_equal(lg_proc_run(argv, env, &p), 0);
	assert_int_equal(p.status, 2);
	assert_non_null(strstr(p.err, "LINGEN_SEED: found '12x'"));
	lg_proc_free(&p);
	p = cli(0, NULL, "help", "check", NULL);
	assert_non_null(strstr(p.out, "LINGEN_SEED"));
	lg_proc_free(&p);
}

/* bench --jit needs no GPU for its compile and cache-read parts: exit 0,
 * one JSON object with a positive compile and read time for every kernel;
 * without a GPU a note says load and launch were skipped. */
static void test_bench_jit(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("lg-jit");
	assert_non_null(dir);
	struct lg_proc p = cli(0, dir, "bench", "--jit", NORMS, "--json", "--reps", "3", NULL);
	cJSON *o = cJSON_Parse(p.out);
	assert_non_null(o);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "bench")), "jit");
	assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItem(o, "nvrtc")));
	assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItem(o, "arch")));
	cJSON *c = cJSON_GetObjectItem(o, "compile");
	assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(c, "first_ms")) > 0);
	assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(c, "median_after_first_ms")) > 0);

	lg_spec_file *f;
	assert_int_equal(lg_spec_file_load(NORMS, &f), LG_OK);
	cJSON *ks = cJSON_GetObjectItem(o, "kernels");
	assert_int_equal(cJSON_GetArraySize(ks), (int)lg_spec_file_count(f));
	for (size_t i = 0; i < lg_spec_file_count(f); i++) {
		cJSON *k = cJSON_GetArrayItem(ks, (int)i);
		assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(k, "kernel")),
				    lg_spec_entry(lg_spec_file_get(f, i)));
		assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "compile_ms")) > 0);
		assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "gen_ms")) > 0);
		assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "read_us")) > 0);
	}
	lg_spec_file_free(f);

	bool gpu = cJSON_IsTrue(cJSON_GetObjectItem(o, "gpu"));
	if (!gpu) {
		assert_non_null(strstr(p.err, "no GPU: load and launch parts skipped"));
		assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(o, "note")),
				       "no GPU: load and launch parts skipped"));
		assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "launch")));
	} else {
		assert_true(cJSON_IsObject(cJSON_GetObjectItem(o, "launch")));
	}
	cJSON_Delete(o);
	lg_proc_free(&p);

	/* the table form says the same */
	p = cli(0, dir, "bench", "--jit", NORMS, "--reps", "1", NULL);
	assert_non_null(strstr(p.out, "compile (NVRTC)"));
	lg_proc_free(&p);

	run(2, dir, "bench", "--jit", NORMS, "--tokens", "256,512", NULL);

	p = cli(0, NULL, "bench", "--help", NULL);
	assert_non_null(strstr(p.out, "--jit"));
	lg_proc_free(&p);

	lg_test_rm_rf(dir);
	free(dir);
}

/* A model build for sm_90a and sm_80: every kernel for sm_90a, the FP8
 * GEMMs (sm_90a only) skipped for sm_80 and listed so, exit 0; a loader
 * asking for one on sm_80 gets an error naming kernel, arch and reason. */
static void check_model_archs(const char *cache, const char *out, const char *manifest)
{
	struct lg_proc p = cli(0, cache, "build", LING_MINI, "--arch", "sm_90a,sm_80", "-o", out, NULL);
	assert_non_null(strstr(p.err, "skipped for sm_80: 12 kernels of fp8_gemm (the family runs on sm_90a only)"));
	assert_non_null(strstr(p.err, "skipped for sm_80: 6 kernels of fp8_grouped_gemm"));
	assert_null(strstr(p.err, "skipped for sm_90a"));
	lg_proc_free(&p);
	char *text = lg_test_read_file(manifest, NULL);
	cJSON *m = cJSON_Parse(text);
	const cJSON *ks = cJSON_GetObjectItem(m, "kernels"), *sk = cJSON_GetObjectItem(m, "skipped");
	int n90 = 0, n80 = 0;
	for (const cJSON *k = ks->child; k; k = k->next) {
		const char *arch = cJSON_GetStringValue(cJSON_GetObjectItem(k, "arch"));
		const char *entry = cJSON_GetStringValue(cJSON_GetObjectItem(k, "entry"));
		n90 += strcmp(arch, "sm_90a") == 0;
		n80 += strcmp(arch, "sm_80") == 0;
		assert_false(strcmp(arch, "sm_80") == 0 && strncmp(entry, "lg_fp8_gemm", 11) == 0);
		assert_false(strcmp(arch, "sm_80") == 0 && strncmp(entry, "lg_fp8_grouped_gemm", 19) == 0);
	}
	assert_int_equal(n90, 39);
	assert_int_equal(n80, 39 - 18);
	assert_int_equal(cJSON_GetArraySize(sk), 18);
	const char *fp8 = cJSON_GetStringValue(cJSON_GetObjectItem(sk->child, "entry"));
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(sk->child, "arch")), "sm_80");
	lg_bundle *b = NULL;
	assert_int_equal(lg_bundle_open(out, &b), LG_OK);
	struct lg_plan plan;
	const void *cubin = NULL;
	struct lg_blob owned = {0};
	size_t size = 0;
	struct lg_spec asked = {0};
	struct lg_target sm80;
	snprintf(asked.entry, sizeof asked.entry, "%s", fp8);
	assert_true(lg_target_parse("sm_80", &sm80));
	assert_int_equal(lg_bundle_get(b, &asked, "{}", &sm80, &plan, &cubin, &size, &owned), LG_ERR_MISSING);
	assert_null(owned.base);
	assert_non_null(strstr(lg_last_error(), fp8));
	assert_non_null(strstr(lg_last_error(), "for sm_80 is not in bundle"));
	assert_non_null(strstr(lg_last_error(), "family fp8_gemm runs on sm_90a only"));
	lg_bundle_free(b);
	cJSON_Delete(m);
	free(text);
	/* sm_80 alone, and sm_100a (when this NVRTC knows it): exit 0 */
	run(0, cache, "build", LING_MINI, "--arch", "sm_80", "-o", out, NULL);
	p = cli(-1, cache, "build", LING_MINI, "--arch", "sm_100a", "-o", out, NULL);
	assert_true(p.status == 0 || strstr(p.err, "this NVRTC"));
	lg_proc_free(&p);
}

/* expand: the spec file on stdout (or -o FILE), a summary on stderr; gen
 * and build take the model config itself; a bad config is exit 2. */
static void test_expand(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cli-expand");
	struct lg_proc p = cli(0, NULL, "expand", LING_MINI, NULL);
	cJSON *o = cJSON_Parse(p.out);
	assert_non_null(o);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")), "ling-mini-2.0");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")),
			    "ling-mini-2.0 training step");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "kernels")), 39);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "skipped")), 0);
	cJSON_Delete(o);
	assert_non_null(strstr(p.err, "39 kernels, 0 skipped"));

	/* --arch: the FP8 GEMMs (sm_90a only) skipped for sm_80, named in the summary */
	struct lg_proc e = cli(0, NULL, "expand", LING_MINI, "--arch", "sm_80", NULL);
	assert_non_null(strstr(e.err, "21 kernels, 6 skipped (for sm_80: fp8_gemm (sm_90a only), "
				      "fp8_grouped_gemm (sm_90a only))"));
	assert_non_null(strstr(e.out, "\"arch\": \"sm_80\", \"why\": \"family runs on sm_90a only\""));
	lg_proc_free(&e);
	e = cli(0, NULL, "expand", LING_MINI, "--arch", "sm_90a", NULL);
	assert_non_null(strstr(e.err, "39 kernels, 0 skipped\n"));
	lg_proc_free(&e);

	/* -o FILE: the same text; gen on it and on the model agree */
	char *spec = lg_test_path(dir, "step.json");
	run(0, NULL, "expand", LING_MINI, "-o", spec, NULL);
	char *text = lg_test_read_file(spec, NULL);
	assert_non_null(text);
	assert_string_equal(text, p.out);
	free(text);
	lg_proc_free(&p);
	struct lg_proc a = cli(0, NULL, "gen", LING_MINI, NULL);
	struct lg_proc b = cli(0, NULL, "gen", spec, NULL);
	assert_int_equal(lg_test_count(a.out, "generated, do not edit"), 39);
	assert_string_equal(a.out, b.out);
	lg_proc_free(&a);
	lg_proc_free(&b);
	/* gen for sm_80: the FP8 GEMMs (sm_90a only) are skipped, each named */
	a = cli(0, NULL, "gen", LING_MINI, "--arch", "sm_80", NULL);
	assert_int_equal(lg_test_count(a.out, "generated, do not edit"), 39 - 18);
	assert_int_equal(lg_test_count(a.err, "skipped for sm_80: lg_fp8_"), 18);
	assert_non_null(strstr(a.err, "(the family fp8_grouped_gemm runs on sm_90a only)"));
	assert_non_null(strstr(a.err, "21 kernels generated for sm_80, 18 skipped"));
	lg_proc_free(&a);

	char *out = lg_test_path(dir, "bundle"), *cache = lg_test_path(dir, "cache");
	run(0, cache, "build", LING_MINI, "--arch", "sm_90a", "-o", out, NULL);
	char *manifest = lg_test_path(out, "manifest.json");
	text = lg_test_read_file(manifest, NULL);
	assert_non_null(text);
	cJSON *m = cJSON_Parse(text);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "kernels")), 39);
	cJSON_Delete(m);
	free(text);
	check_model_archs(cache, out, manifest);

	/* a bad model config: exit 2, naming the file, the key and the kernel */
	char *bad = lg_test_path(dir, "bad-model.json");
	char *good = lg_test_read_file(LING_MINI, NULL);
	assert_non_null(good);
	char *at = strstr(good, "\"hidden\": 2048");
	assert_non_null(at);
	memcpy(at, "\"hidden\": 2000", 14);
	lg_test_write_file(bad, good, strlen(good));
	free(good);
	p = cli(2, NULL, "expand", bad, NULL);
	assert_non_null(strstr(p.err, "bad-model.json: hidden: found 2000"));
	assert_non_null(strstr(p.err, "needed by kernel rmsnorm_quant forward"));
	assert_string_equal(p.out, "");
	lg_proc_free(&p);
	p = cli(2, NULL, "gen", bad, NULL);
	assert_non_null(strstr(p.err, "bad-model.json: hidden: found 2000"));
	lg_proc_free(&p);
	p = cli(2, NULL, "expand", NORMS, NULL); /* a spec file is not a model config */
	assert_non_null(strstr(p.err, "unknown key \"kernels\""));
	lg_proc_free(&p);
	char *missing = lg_test_path(dir, "no-such-model.json");
	run(2, NULL, "expand", missing, NULL);
	run(2, NULL, "expand", NULL);
	run(2, NULL, "expand", LING_MINI, LING_MINI, NULL);

	free(missing);
	free(bad);
	free(manifest);
	free(out);
	free(cache);
	free(spec);
	lg_test_rm_rf(dir);
	free(dir);
}

/* Messages name what the user wrote: a GEMM size refused in a model config
 * names the model keys it comes from, and an unknown key far from every
 * allowed one gets no "did you mean" (issue 36, class 10). */
static void test_messages_name_user_keys(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cli-messages");
	char *model = lg_test_path(dir, "hd63.json"), *text = lg_test_read_file(LING_MINI, NULL);
	assert_non_null(text);
	char *at = strstr(text, "\"head_dim\": 128");
	assert_non_null(at);
	memcpy(at, "\"head_dim\": 63 ", 15);
	lg_test_write_file(model, text, strlen(text));
	struct lg_proc p = cli(2, NULL, "expand", model, NULL);
	assert_non_null(strstr(p.err, "hd63.json: n: found 1512"));
	assert_non_null(strstr(p.err, "model keys q_heads 16, kv_heads 4, head_dim 63: "
				      "n = (q_heads + 2 kv_heads) head_dim"));
	lg_proc_free(&p);

	char *spec = lg_test_path(dir, "foo.json");
	static const char foo[] = "{\"kernels\": [{\"op\": \"rmsnorm\", \"pass\": \"forward\", "
				  "\"dtype\": \"bf16\", \"hidden\": 2048, \"foo\": 1}]}";
	lg_test_write_file(spec, foo, sizeof foo - 1);
	p = cli(2, NULL, "gen", spec, NULL);
	assert_non_null(strstr(p.err, "foo.json: kernels[0]: unknown key \"foo\""));
	assert_null(strstr(p.err, "did you mean"));
	lg_proc_free(&p);
	free(spec);
	free(text);
	free(model);
	lg_test_rm_rf(dir);
	free(dir);
}

int main(void)
{
	/* the environment must not steer the CLI under test */
	unsetenv("LINGEN_ARCH");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_help),          cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_gen),           cmocka_unit_test(test_gen_bad_input),
		cmocka_unit_test(test_build),         cmocka_unit_test(test_write_errors),         cmocka_unit_test(test_cache),
		cmocka_unit_test(test_check_without_gpu), cmocka_unit_test(test_check_seed),
		cmocka_unit_test(test_tokens_strict),     cmocka_unit_test(test_tuning_unreadable),
		cmocka_unit_test(test_bench_jit),
		cmocka_unit_test(test_expand),
		cmocka_unit_test(test_messages_name_user_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
