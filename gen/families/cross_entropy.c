/*
 * cross_entropy.c - family "cross_entropy" (docs/kernels.md K9): softmax cross
 * entropy over logits [tokens, vocab] (bf16 or fp32) with labels [tokens]
 * (int64 or int32, key `index`), ignore_index and torch's label smoothing.
 *
 * Math, per row with label y (lse = log sum_v exp(x_v), C the classes, e
 * the label smoothing; exactly torch's F.cross_entropy(label_smoothing=e)):
 *   loss = (1 - e) (lse - x_y) + e (lse - sum_v x_v / C)
 *   grad_v = (exp(x_v - m) / S - (1 - e) [v == y] - e / C) g
 * where m = max_v x_v and S = sum_v exp(x_v - m). Rows whose label is
 * ignore_index get loss = S = m = 0 and a zero gradient. A label outside
 * [0, C) that is not ignore_index gives loss +inf (NaN with e = 1; torch
 * raises instead). e is in [0, 1], as torch allows.
 *
 * Parts (key `part`), each one kernel, for a vocab-parallel trainer that
 * puts its own all-gather between them:
 *   full   forward: loss, S, m; backward: grad (from S, m, g).
 *   shard  forward over this rank's columns [vocab_start, vocab_start +
 *          vocab) of C = `classes`: stats [tokens, 6] fp32 = m, S as a hi +
 *          lo pair (S relative to this shard's m, kept to fp64 accuracy),
 *          the target logit (-inf when the label is not in the shard), and
 *          the sum of the shard's logits as a hi + lo pair (label smoothing;
 *          0 without). Backward: the shard's grad from the merged S, m.
 *   merge  forward: stats of every shard gathered as [shards, tokens, 6] ->
 *          loss, S, m of the whole row (log-sum-exp merge in fp64).
 *
 * Strategy (full and shard): one row per CTA, `tile.threads` threads, each
 * keeping `tile.unroll` 16-byte loads in flight per step (at 512 x 8: 64
 * KiB a CTA). The forward is one streaming pass with an online max: per
 * step a thread takes the max of its values (bf16: packed max.bf16x2, 3 a
 * piece), rescales its sum when the max grows, and adds exp(x - m)
 * (ex2.approx of the exact difference times log2 e) of each 16-byte piece
 * in fp32 (8 bf16 or 4 fp32 values) into an fp64 running sum; the CTA
 * merges (m, S) by log-sum-exp in fp64 (warps by shuffles, then warp 0, a
 * warp a lane). It is a pure read stream, so what bounds it is keeping the
 * loads going through each row's start and end: the first step's loads
 * are issued before the label is known (an ignored row wastes them), and
 * the registers are held so that several CTAs share an SM, one streaming
 * while another starts or reduces its row (unroll 8: 64 registers, two
 * CTAs of 512, 1024 threads x 128 bytes in flight at most; unroll 4: 40,
 * 1536 threads). The backward streams the row
 * again with 16-byte loads and stores (to a new buffer, or in place over
 * the logits). Rows need not start 16-byte aligned (any vocab): a row's
 * first and last values outside its aligned middle are handled one per
 * thread.
 *
 * Fused forward + backward (`fused`, part full, a uniform output gradient
 * g[0], e.g. 1/n for the mean): the gradient needs the row's final (m, S)
 * before its first value, so the row is held or read twice:
 *   - tile.cluster n > 1 (sm_90+, rows of whole 16-byte pieces; the default
 *     there: the fewest CTAs whose slices fit 100 KiB, 4 at the target): a
 *     cluster of n CTAs a row, each copying its slice of the row into
 *     shared memory with cp.async (all in flight at once, at most 8 commit
 *     groups a thread, issued before the label is known), merging (m, S)
 *     through distributed shared memory, then writing the gradient from
 *     shared memory. HBM sees one read of
 *     the logits and one write of the gradient, 2 x M x V values, instead
 *     of forward + backward's 3 x M x V (at the target 5.15 GB, not 7.73).
 *   - tile.cluster 1 (sm_80, odd vocabs): one CTA a row streams it twice;
 *     the first pass reads with an L2 evict-last policy, the second with
 *     evict-first, one CTA per SM (1024 threads: 132 rows live, about 41 MB
 *     of bf16 rows at the target vocab, inside the H200's L2), so the second
 *     read should come from L2 (ncu's L2 hit rate tells).
 */
#include <math.h>
#include <stdio.h>

#include "cross_entropy.h"
#include "cross_entropy_grad.h"

#include "error.h"
#include "templates.h"

static const char *const part_names[PART_COUNT] = {"full", "shard", "merge"};
static const char *const index_names[2] = {"int64", "int32"};
static const char *const index_words[2] = {"i64", "i32"};
static const char *const inplace_words[2] = {"new", "inplace"};
static const char *const fused_words[2] = {"nofused", "fused"};
static const int64_t threads_ok[] = {128, 256, 512, 1024, 0};
static const int64_t unroll_ok[] = {1, 2, 4, 8, 0};
static const int64_t cluster_ok[] = {1, 2, 4, 8, 0};
#define CLUSTER_SMEM (200 * 1024) /* a cluster CTA's slice of the row at most */
#define CLUSTER_DEFAULT_SMEM (100 * 1024) /* the default: two CTAs an SM */

static const struct lg_key keys[NKEYS] = {
	[K_VOCAB] = LG_KEY_DIM("vocab", "v", 1, 1 << 26, 0,
			       "columns of the logits (a shard's with part shard; the whole row with merge)"),
	[K_PART] = {.path = "part", .type = LG_KEY_ENUM, .values = part_names, .nvalues = PART_COUNT,
		    .has_def = true, .def = PART_FULL, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 11,
		    .doc = "full rows; one vocab shard's statistics / gradient; or the merge of the shards'"},
	[K_CLASSES] = {.path = "classes", .type = LG_KEY_INT, .min = 0, .max = INT32_MAX, .has_def = true,
		       .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 12, .abbrev = "c",
		       .doc = "the whole vocabulary C with part shard (label smoothing's e / C); 0: vocab"},
	[K_INDEX] = {.path = "index", .type = LG_KEY_ENUM, .values = index_names, .nvalues = 2, .has_def = true,
		     .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20, .words = index_words,
		     .doc = "element type of the labels"},
	[K_IGNORE] = {.path = "ignore_index", .type = LG_KEY_INT, .min = INT32_MIN, .max = INT32_MAX,
		      .has_def = true, .def = -100, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21, .abbrev = "ii",
		      .doc = "rows with this label get loss 0 and a zero gradient"},
	[K_SMOOTH] = {.path = "label_smoothing", .type = LG_KEY_NUMBER, .lo = -1.0, .hi = 2.0, .has_def = true,
		      .def_num = 0.0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 22, .abbrev = "ls",
		      .doc = "e in [0, 1], as torch: label smoothing (target (1 - e) onehot + e / C)"},
	[K_INPLACE] = {.path = "inplace", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		       .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 23, .words = inplace_words,
		       .doc = "the gradient written over the logits (grad not used)"},
	[K_FUSED] = {.path = "fused", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		     .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24, .words = fused_words,
		     .doc = "forward, part full: also the gradient for a uniform output gradient g[0]"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "n", 128, 1024, threads_ok, "threads per CTA (one row a CTA)"),
	[K_UNROLL] = LG_KEY_TILE("unroll", "u", 1, 8, unroll_ok, "16-byte loads in flight per thread per step"),
	[K_CLUSTER] = LG_KEY_TILE("cluster", "cl", 1, 8, cluster_ok,
				  "fused forward: CTAs a row keeping it in shared memory (sm_90+, rows 16-byte "
				  "aligned); 1: one CTA re-reading the row from L2"),
};

static const struct lg_size fwd_sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of the logits", 0, 0},
	{"vocab_start", "V0", 0, INT32_MAX, "part shard: the shard's first column (else not read)", 0, 0},
	{"shards", "NS", 1, 65536, "part merge: shards gathered (else not read)", 2, 0},
};
static const struct lg_size bwd_sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of the logits", 0, 0},
	{"vocab_start", "V0", 0, INT32_MAX, "part shard: the shard's first column (else not read)", 0, 0},
};

enum { F_LOGITS, F_LABELS, F_STATS_IN, F_G, F_LOSS, F_SUM, F_MAX, F_STATS, F_GRAD, F_NARGS };
enum { B_LOGITS, B_LABELS, B_SUM, B_MAX, B_DLOSS, B_GRAD, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_LOGITS] = {"logits", LG_ARG_IN, LG_ELEM_DTYPE, "tokens, vocab", 16, "written with inplace"},
	[F_LABELS] = {"labels", LG_ARG_IN, LG_ELEM_INDEX, "tokens", 4, "int64 read as two words: 4-byte aligned"},
	[F_STATS_IN] = {"stats_in", LG_ARG_IN, LG_ELEM_FP32, "shards, tokens, 6", 16,
			"part merge: every shard's stats, gathered"},
	[F_G] = {"g", LG_ARG_IN, LG_ELEM_FP32, "1", 4, "fused: the output gradient of every row"},
	[F_LOSS] = {"loss", LG_ARG_OUT, LG_ELEM_FP32, "tokens", 4, NULL},
	[F_SUM] = {"sum_exp", LG_ARG_OPT_OUT, LG_ELEM_FP32, "tokens", 4, "S = sum exp(x - m)"},
	[F_MAX] = {"max_logit", LG_ARG_OPT_OUT, LG_ELEM_FP32, "tokens", 4, "m"},
	[F_STATS] = {"stats", LG_ARG_OUT, LG_ELEM_FP32, "tokens, 6", 16,
		     "part shard: m, S hi, S lo, target logit, sum x hi, sum x lo"},
	[F_GRAD] = {"grad", LG_ARG_OUT, LG_ELEM_DTYPE, "tokens, vocab", 16, "fused"},
};
static const struct lg_arg bwd_args[B_NARGS] = {
	[B_LOGITS] = {"logits", LG_ARG_IN, LG_ELEM_DTYPE, "tokens, vocab", 16, "written with inplace"},
	[B_LABELS] = {"labels", LG_ARG_IN, LG_ELEM_INDEX, "tokens", 4, "int64 read as two words: 4-byte aligned"},
	[B_SUM] = {"sum_exp", LG_ARG_IN, LG_ELEM_FP32, "tokens", 4, "S (the merged S with part shard)"},
	[B_MAX] = {"max_logit", LG_ARG_IN, LG_ELEM_FP32, "tokens", 4, "m (the merged m with part shard)"},
	[B_DLOSS] = {"dloss", LG_ARG_IN, LG_ELEM_FP32, "tokens", 4, "the output gradient per row"},
	[B_GRAD] = {"grad", LG_ARG_OUT, LG_ELEM_DTYPE, "tokens, vocab", 16, "not used with inplace"},
};


static int part_of(const struct lg_spec *s)
{
	return (int)lg_spec_int(s, K_PART);
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	double e = lg_spec_num(s, K_SMOOTH);
	int part = part_of(s);
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t v = lg_spec_int(s, K_VOCAB), c = lg_spec_int(s, K_CLASSES);
	lg_status st = lg_ce_check_smoothing(e, c ? c : v, where);
	if (st != LG_OK)
		return st;
	if (bwd && part == PART_MERGE)
		return lg_spec_error(where, "part: found \"merge\" with pass \"backward\", allowed: \"full\" or "
					    "\"shard\" (the merge is a forward kernel)");
	if (lg_spec_int(s, K_FUSED) && (bwd || part != PART_FULL))
		return lg_spec_error(where, "fused: found true with pass \"%s\" and part \"%s\", allowed: "
					    "pass \"forward\" with part \"full\"",
				     lg_pass_names[s->pass], part_names[part]);
	if (lg_spec_int(s, K_INPLACE) && !bwd && !lg_spec_int(s, K_FUSED))
		return lg_spec_error(where, "inplace: found true in a forward without fused, allowed: the backward, "
					    "or the fused forward (which writes a gradient)");
	if (c != 0 && part != PART_SHARD && c != v)
		return lg_spec_error(where, "classes: found %lld with part \"%s\", allowed: 0 or vocab = %lld "
					    "(only a shard's vocab differs from the classes)",
				     (long long)c, part_names[part], (long long)v);
	if (c != 0 && c < v)
		return lg_spec_error(where, "classes: found %lld, allowed: 0 or at least vocab = %lld",
				     (long long)c, (long long)v);
	if (lg_spec_has(s, K_CLUSTER) && lg_spec_int(s, K_CLUSTER) > 1) {
		int64_t n = lg_spec_int(s, K_CLUSTER), esz = s->dtype == LG_DTYPE_FP32 ? 4 : 2;
		if (!lg_spec_int(s, K_FUSED))
			return lg_spec_error(where, "tile.cluster: found %lld, allowed: 1 without fused (only the "
						    "fused forward keeps rows in shared memory)", (long long)n);
		if ((v * esz) % 16 != 0)
			return lg_spec_error(where, "tile.cluster: found %lld with vocab %lld, allowed: 1 (a row "
						    "must span whole 16-byte pieces: vocab a multiple of %lld)",
					     (long long)n, (long long)v, (long long)(16 / esz));
		if ((v * esz / 16 + n - 1) / n * 16 > CLUSTER_SMEM)
			return lg_spec_error(where, "tile.cluster: found %lld with vocab %lld, allowed: enough CTAs "
						    "that a row's slice fits %d KiB of shared memory",
					     (long long)n, (long long)v, CLUSTER_SMEM / 1024);
	}
	return LG_OK;
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	int part = part_of(s);
	if (s->pass == LG_PASS_BACKWARD) {
		if (lg_spec_int(s, K_INPLACE))
			used[B_GRAD] = 0;
		return;
	}
	bool fused = lg_spec_int(s, K_FUSED) != 0;
	if (part == PART_MERGE)
		used[F_LOGITS] = 0;
	if (part != PART_MERGE)
		used[F_STATS_IN] = 0;
	if (!fused)
		used[F_G] = 0;
	if (!fused || lg_spec_int(s, K_INPLACE))
		used[F_GRAD] = 0;
	if (part == PART_SHARD)
		used[F_LOSS] = used[F_SUM] = used[F_MAX] = 0;
	else
		used[F_STATS] = 0;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	bool fused = lg_spec_int(s, K_FUSED) != 0, bwd = s->pass == LG_PASS_BACKWARD;
	p->v[P_PART] = part_of(s);
	p->v[P_FUSED] = fused;
	p->v[P_BWD] = bwd;
	p->v[P_INPLACE] = lg_spec_int(s, K_INPLACE);
	/* defaults: 512 threads x 8 loads; the fused forward 1024 x 8 (one
	 * CTA an SM, so the rows in flight fit in L2 for the second read) */
	p->tile[K_THREADS] = p->v[P_THREADS] = lg_spec_has(s, K_THREADS) ? lg_spec_int(s, K_THREADS)
							: fused ? 1024 : 512;
	p->tile[K_UNROLL] = p->v[P_UNROLL] = lg_spec_has(s, K_UNROLL) ? lg_spec_int(s, K_UNROLL) : 8;
	if (p->v[P_PART] == PART_MERGE)
		p->tile[K_THREADS] = p->v[P_THREADS] = lg_spec_has(s, K_THREADS) ? lg_spec_int(s, K_THREADS) : 256;
	/* the fused forward's cluster: the spec's; else on sm_90+ with aligned
	 * rows the fewest CTAs (2, 4, 8) whose slices fit CLUSTER_DEFAULT_SMEM
	 * (two CTAs an SM); else 1 (the L2 second pass) */
	int64_t esz = s->dtype == LG_DTYPE_FP32 ? 4 : 2, v = lg_spec_int(s, K_VOCAB), nb = v * esz / 16;
	int64_t n = 1;
	if (lg_spec_has(s, K_CLUSTER)) {
		n = lg_spec_int(s, K_CLUSTER);
	} else if (fused && t->sm >= 90 && (v * esz) % 16 == 0) {
		for (int64_t c = 2; c <= 8 && n == 1; c *= 2)
			if ((nb + c - 1) / c * 16 <= CLUSTER_DEFAULT_SMEM)
				n = c;
	}
	if (n > 1 && t->sm < 90)
		return lg_fail(LG_ERR_SPEC, "%s: tile.cluster: found %lld, allowed for %s: 1 (clusters need sm_90 "
			       "or later)", s->entry, (long long)n, t->name);
	p->tile[K_CLUSTER] = p->v[P_CLUSTER] = n;
	p->v[P_PER] = n > 1 ? (nb + n - 1) / n : 0;
	if (n > 1) {
		p->cluster[0] = (unsigned)n;
		if (!lg_spec_has(s, K_THREADS))
			p->tile[K_THREADS] = p->v[P_THREADS] = 512;
	}
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d)
{
	(void)e;
	int64_t m = sizes[0], n = p->v[P_THREADS];
	*d = (struct lg_launch_dim){.grid = {(unsigned)m, 1, 1}, .block = {(unsigned)n, 1, 1}};
	if (p->v[P_PART] == PART_MERGE)
		d->grid[0] = (unsigned)((m + n - 1) / n);
	if (p->v[P_CLUSTER] > 1) { /* a cluster of P_CLUSTER CTAs a row, each a slice in shared memory */
		int64_t cl = p->v[P_CLUSTER] * m;
		d->grid[0] = cl > UINT32_MAX ? UINT32_MAX : (unsigned)cl;
		d->smem = (unsigned)(p->v[P_PER] * 16);
	}
}

/* Tile variants for `lingen tune`: 256, 512 and 1024 threads with 4 or 8
 * loads in flight (the merge: 128 to 1024 threads); the fused forward also
 * clusters of 2, 4 and 8 CTAs a row with 256, 512 and 1024 threads. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	static const int64_t th[] = {256, 512, 1024};
	static const int64_t un[] = {4, 8};
	int n = 0;
	if (part_of(s) == PART_MERGE)
		return lg_candidate_values(s, t, out, 0, max, K_THREADS, threads_ok);
	bool fused = lg_spec_int(s, K_FUSED) != 0;
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++) {
			struct lg_tile_choice c = lg_tile1(K_THREADS, th[i]);
			c.v[K_UNROLL] = un[j];
			c.set |= (uint64_t)1 << K_UNROLL;
			if (fused) { /* the L2 second pass */
				c.v[K_CLUSTER] = 1;
				c.set |= (uint64_t)1 << K_CLUSTER;
			}
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	/* the fused forward's clusters (sm_90+, aligned rows, slices that fit) */
	for (int cl = 2; fused && cl <= 8; cl *= 2)
		for (int i = 0; i < 3; i++) {
			struct lg_tile_choice c = lg_tile1(K_THREADS, th[i]);
			c.v[K_CLUSTER] = cl;
			c.set |= (uint64_t)1 << K_CLUSTER;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	return n;
}

/* What a launch computes: the comments of its typed launchers (lingen_ops.h). */
static const char doc_forward[] =
	"K9: softmax cross entropy (op \"cross_entropy\"). logits [tokens, vocab]\n"
	"  bf16 or fp32, 16-byte aligned (its rows need not be: any vocab), labels\n"
	"  [tokens] int64 (int32 with \"index\": \"int32\"), 4-byte aligned (int64 ones\n"
	"  too: read as two words); a row whose label is the\n"
	"  spec's ignore_index gets loss = S = m = 0 and a zero gradient. Each\n"
	"  launcher refuses a kernel of another op, pass or part.";
/* The forward's launchers: by part (and fused), each with the sizes and
 * arguments of its part. */
static const struct lg_form fwd_forms[] = {
	{"forward", "part=full fused=false", "tokens vocab_start=0 shards=1", "logits labels loss sum_exp max_logit",
	 "Forward (part \"full\"): loss, sum_exp S = sum exp(x - m), max_logit m\n"
	 "  [tokens] fp32 (S and m optional: 0)."},
	{"fused", "part=full fused=true", "tokens vocab_start=0 shards=1",
	 "logits labels g loss sum_exp max_logit grad",
	 "The fused forward + backward (\"fused\": true): as the forward, and grad\n"
	 "  [tokens, vocab] in logits' type for the output gradient g[0] (a device\n"
	 "  fp32 scalar, e.g. 1 / rows for the mean) on every row; with \"inplace\"\n"
	 "  grad is 0 and the gradient is written over the logits."},
	{"shard_stats", "part=shard", "tokens vocab_start shards=1", "logits labels stats",
	 "Vocab parallel, part \"shard\": this rank's logits [tokens, vocab] (columns\n"
	 "  vocab_start .. of the classes) -> stats [tokens, 6] fp32: m, S hi, S lo,\n"
	 "  target logit (-inf when the label is not in the shard), sum x hi, lo.\n"
	 "  The trainer all-gathers them into [shards, tokens, 6]."},
	{"merge", "part=merge", "tokens vocab_start=0 shards", "labels stats_in loss sum_exp max_logit",
	 "Part \"merge\": the gathered stats_in [shards, tokens, 6] -> loss, S, m of\n"
	 "  the whole rows (S, m optional), for lg_cross_entropy_backward of each\n"
	 "  shard."},
};
static const char doc_backward[] =
	"Backward (part \"full\" or \"shard\"): grad = (exp(x - m) / S - (1 - e)\n"
	"  onehot - e / C) dloss[row] in logits' type, from the forward's S and m\n"
	"  (the merged ones for a shard, whose columns start at vocab_start; 0\n"
	"  for part \"full\"); with \"inplace\" grad is 0 and the logits are\n"
	"  overwritten.";

const struct lg_family lg_family_cross_entropy = {
	.op = "cross_entropy",
	.summary = "softmax cross entropy: forward (loss, S, m), backward, vocab-parallel shard/merge (K9)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = (1u << LG_DTYPE_BF16) | (1u << LG_DTYPE_FP32),
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {3, fwd_sizes, F_NARGS, fwd_args, doc_forward, 4, fwd_forms},
		[LG_PASS_BACKWARD] = {2, bwd_sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = lg_cross_entropy_emit,
	.geometry = geometry,
	.candidates = candidates,
};
