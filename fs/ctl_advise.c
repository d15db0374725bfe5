/*
 * ctl_advise.c - "advise": from this node's own record of its newest
 * checkpoints (when each was made, and when the last of its files was
 * sealed, protected and persisted: struct eng_ckpt_info), the checkpoint
 * interval that loses the least training time, the --persist-every that
 * keeps write-back within what the persist dir takes, and the odds that a
 * node fails while a checkpoint is not yet safe from it.
 *
 * The model (docs/operations.md, "How often to checkpoint"): a save stalls
 * the job for d (its directory made to its last file closed: under --sync
 * protect that includes the fsyncs' wait for protection); the job fails
 * every M (--mtbf) and then loses on average half an interval T of work
 * and the load of the checkpoint it resumes from, R (what this node's
 * reads of its newest checkpoints took, first opened to last closed).
 * The fraction of time lost, d / T + (T / 2 + R) / M, is least at Young's
 * sqrt(2 d M), Daly's sqrt(2 d M) - d to first order: R adds the same to
 * every T and does not move the optimum.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_i.h"
#include "group.h"
#include "report.h"

#define ADVISE_LAST 8	      /* the newest checkpoints looked at */
#define ADVISE_MTBF_H 24.0    /* --mtbf's default: hours between failures */

/* What one checkpoint's record says, in ms (0: not known). */
struct ck_times {
	uint64_t born, sealed, protected_, persisted, bytes;
};

struct ck_list {
	struct ck_times v[ADVISE_LAST];
	unsigned n;	/* the newest ADVISE_LAST, oldest first */
	unsigned all;	/* checkpoints in all */
	/* The newest ADVISE_LAST loads here, any daemon's checkpoints. */
	uint64_t load_ms[ADVISE_LAST], load_bytes[ADVISE_LAST];
	unsigned nload;
};

static int ck_row(void *ctx, const struct eng_ckpt_info *ci)
{
	struct ck_list *l = ctx;

	l->all++;
	if (ci->load_from_ms) {
		if (l->nload == ADVISE_LAST) {
			memmove(l->load_ms, l->load_ms + 1,
				(ADVISE_LAST - 1) * sizeof(l->load_ms[0]));
			memmove(l->load_bytes, l->load_bytes + 1,
				(ADVISE_LAST - 1) * sizeof(l->load_bytes[0]));
			l->nload--;
		}
		l->load_ms[l->nload] = ci->load_to_ms - ci->load_from_ms;
		l->load_bytes[l->nload++] = ci->load_bytes;
	}
	/* Made by this daemon, every file sealed: a save it saw whole. */
	if (!ci->born_ms || !ci->sealed_ms || ci->files_lost)
		return 0;
	if (l->n == ADVISE_LAST) {
		memmove(l->v, l->v + 1, (ADVISE_LAST - 1) * sizeof(l->v[0]));
		l->n--;
	}
	l->v[l->n++] = (struct ck_times){ ci->born_ms, ci->sealed_ms,
					  ci->protected_ms, ci->persisted_ms,
					  ci->bytes };
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The median of @v[0..@n), 0 for none. */
static uint64_t median(uint64_t *v, unsigned n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), u64_cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum {
	AD_USED,
	AD_ALL,
	AD_MTBF,
	AD_SAVE,
	AD_PROTECT,
	AD_PERSIST,
	AD_INTERVAL,
	AD_BYTES,
	AD_LOADS,
	AD_LOAD,
	AD_LOAD_BYTES,
	AD_LOAD_RATE,
	AD_ADVISED,
	AD_LOST_NOW,
	AD_LOST_ADVISED,
	AD_PERSIST_EVERY,
	AD_EXPOSED,
	AD_EXPOSED_ONE_IN,
	AD_N
};

static const struct rep_field ad_fields[AD_N] = {
	[AD_USED] = REP_FIELD("checkpoints_used", REP_COUNT),
	[AD_ALL] = REP_FIELD("checkpoints", REP_COUNT),
	[AD_MTBF] = REP_FIELD("mtbf_hours", REP_COUNT),
	[AD_SAVE] = REP_FIELD("save_ms", REP_COUNT),
	[AD_PROTECT] = REP_FIELD("protected_after_ms", REP_COUNT),
	[AD_PERSIST] = REP_FIELD("persisted_after_ms", REP_COUNT),
	[AD_INTERVAL] = REP_FIELD("interval_ms", REP_COUNT),
	[AD_BYTES] = REP_FIELD("bytes", REP_BYTES),
	[AD_LOADS] = REP_FIELD("loads_used", REP_COUNT),
	[AD_LOAD] = REP_FIELD("load_ms", REP_COUNT),
	[AD_LOAD_BYTES] = REP_FIELD("load_bytes", REP_BYTES),
	[AD_LOAD_RATE] = REP_FIELD("load_bytes_per_second", REP_BYTES),
	[AD_ADVISED] = REP_FIELD("interval_advised_seconds", REP_COUNT),
	[AD_LOST_NOW] = REP_FIELD("time_lost_now", REP_PERCENT),
	[AD_LOST_ADVISED] = REP_FIELD("time_lost_advised", REP_PERCENT),
	[AD_PERSIST_EVERY] = REP_FIELD("persist_every_advised", REP_COUNT),
	[AD_EXPOSED] = REP_FIELD("exposed", REP_PERCENT),
	[AD_EXPOSED_ONE_IN] = REP_FIELD("exposed_one_in", REP_COUNT),
};

static const struct rep_field ad_root = REP_GROUP("advise", ad_fields, AD_N);

static const struct rep_text ad_text[] = {
	TXT(NULL, NULL,
	    "from the {checkpoints_used} newest checkpoint{checkpoints_used?|s} "
	    "this daemon saw saved (of {checkpoints}); the job fails every "
	    "{mtbf_hours} h (--mtbf)"),
	TXT(NULL, "save", "{save_ms} ms: its directory made to its last "
			  "file closed ({bytes})"),
	TXT("protected_after_ms", "protected",
	    "{protected_after_ms} ms after the save"),
	TXT("persisted_after_ms", "persisted",
	    "{persisted_after_ms} ms after the save"),
	TXT("interval_ms", "interval", "{interval_ms} ms between checkpoints"),
	TXT("load_ms", "load",
	    "{load_ms} ms: of a checkpoint, the files read here, first "
	    "opened to last closed ({load_bytes}, {load_bytes_per_second}/s; "
	    "{loads_used} load{loads_used?|s})"),
	TXT(NULL, "advice",
	    "checkpoint every {interval_advised_seconds} s (Young/Daly): "
	    "{time_lost_advised} of the job's time lost to saves and "
	    "failures"),
	TXT("interval_ms", "",
	    "at the interval now: {time_lost_now}"),
	TXT("persist_every_advised", "",
	    "--persist-every {persist_every_advised}: a write-back fits in "
	    "that many intervals"),
	TXT(NULL, "",
	    "a node fails while a checkpoint is not yet safe from it "
	    "(until protected, or alone persisted): {exposed} of "
	    "checkpoints, one in {exposed_one_in}"),
};

/*
 * Fraction of time lost at interval @t for stall @d, load @r and MTBF @m
 * (seconds).
 */
static double lost(double d, double t, double r, double m)
{
	return d / t + (t / 2 + r) / m;
}

int rfs_ctl_cmd_advise(struct ctl_req *r, struct rep_out *o)
{
	struct ck_list l = { .n = 0 };
	uint64_t save[ADVISE_LAST], prot[ADVISE_LAST], pers[ADVISE_LAST];
	uint64_t gap[ADVISE_LAST], bytes[ADVISE_LAST];
	unsigned ns = 0, np = 0, nq = 0, ng = 0;
	double mtbf_h = r->mtbf_h > 0 ? r->mtbf_h : ADVISE_MTBF_H;
	double m = mtbf_h * 3600, d, t, w, p, rl = 0;
	bool group = false;
	struct rep *rep;
	struct rep_obj *top;
	int rc;

	rc = eng_list_checkpoints(r->e, ck_row, &l);
	if (rc < 0) {
		rep_out_line(o, 'e', "advise: %s", rfs_ctl_err_name(rc));
		return CTL_EXIT_FAIL;
	}
	if (l.n == 0) {
		rep_out_line(o, 'e',
			     "advise: no checkpoint this daemon saw saved "
			     "whole yet (of %u): save one, then ask again",
			     l.all);
		return CTL_EXIT_FAIL;
	}
	if (r->g) {
		struct grp_info gi;

		group = grp_get_info(r->g, &gi, NULL, 0) >= 0 &&
			gi.tolerates_data > 0;
	}
	for (unsigned i = 0; i < l.n; i++) {
		const struct ck_times *c = &l.v[i];

		save[ns++] = c->sealed - c->born;
		bytes[i] = c->bytes;
		if (c->protected_ && c->protected_ >= c->sealed)
			prot[np++] = c->protected_ - c->sealed;
		if (c->persisted && c->persisted >= c->sealed)
			pers[nq++] = c->persisted - c->sealed;
		if (i)
			gap[ng++] = c->born - l.v[i - 1].born;
	}
	rep = rep_new(&ad_root);
	if (!rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	top = rep_top(rep);
	rep_set_u64(top, AD_USED, l.n);
	rep_set_u64(top, AD_ALL, l.all);
	rep_set_u64(top, AD_MTBF, (uint64_t)(mtbf_h + 0.5));
	rep_set_u64(top, AD_SAVE, median(save, ns));
	rep_set_u64(top, AD_BYTES, median(bytes, l.n));
	if (np)
		rep_set_u64(top, AD_PROTECT, median(prot, np));
	if (nq)
		rep_set_u64(top, AD_PERSIST, median(pers, nq));
	if (ng)
		rep_set_u64(top, AD_INTERVAL, median(gap, ng));
	if (l.nload) {
		uint64_t lms = median(l.load_ms, l.nload),
			 lb = median(l.load_bytes, l.nload);

		rep_set_u64(top, AD_LOADS, l.nload);
		rep_set_u64(top, AD_LOAD, lms);
		rep_set_u64(top, AD_LOAD_BYTES, lb);
		rep_set_u64(top, AD_LOAD_RATE, lb * 1000 / (lms ? lms : 1));
		rl = lms / 1000.0;
	}

	/* A stall of at least 1 ms: the model wants d > 0. */
	d = fmax(median(save, ns), 1) / 1000.0;
	t = d < m / 2 ? sqrt(2 * d * m) - d : m;
	rep_set_u64(top, AD_ADVISED, (uint64_t)(t + 0.5));
	rep_set_pct(top, AD_LOST_ADVISED, 100 * lost(d, t, rl, m));
	if (ng)
		rep_set_pct(top, AD_LOST_NOW,
			    100 * lost(d, fmax(median(gap, ng), 1) / 1000.0,
				       rl, m));
	/* Write-back of one checkpoint over intervals of the advised T. */
	if (nq)
		rep_set_u64(top, AD_PERSIST_EVERY,
			    (uint64_t)fmax(1, ceil(median(pers, nq) / 1000.0 /
						 t)));
	/*
	 * Unsafe from one node's loss until protected (in a group), or
	 * alone until persisted (else for good): the save's own time, then
	 * that wait.
	 */
	w = d + (group ? (np ? median(prot, np) / 1000.0 : 0)
		       : (nq ? median(pers, nq) / 1000.0 : t));
	p = 1 - exp(-w / m);
	rep_set_pct(top, AD_EXPOSED, 100 * p);
	rep_set_u64(top, AD_EXPOSED_ONE_IN,
		    p > 0 ? (uint64_t)fmin(1 / p + 0.5, 1e18) : 0);
	if (rep_err(rep))
		o->err = rep_err(rep);
	else if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, ad_text, sizeof(ad_text) / sizeof(ad_text[0]),
			 10);
	rep_free(rep);
	return CTL_EXIT_OK;
}
