/*
 * ctl_protect.c - "protect" and "rebuild": where the protection of this
 * node's files on its peers stands, and the rebuild that brings them back
 * after a start with empty memory; with --wait, progress streamed until
 * done, and the files that cannot be, named.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>

#include "ctl_i.h"
#include "report.h"

enum group_wait_kind { WAIT_PROTECT, WAIT_REBUILD };

/* The holder that refused, and why, that a wait said last. */
struct stall_said {
	int holder, err;
};
enum group_wait_state { GW_WAIT, GW_DONE, GW_FAIL };

/* Lost files named by protect and rebuild; past this, a count. */
#define CTL_LOST_NAMED 100

struct lost_names {
	struct rep_out *o;
	const char *cmd;
};

static int name_lost(void *ctx, const char *path)
{
	struct lost_names *ln = ctx;

	rep_out_begin(ln->o, 'e');
	/* With a leading '/', as ls shows it. */
	rep_out_printf(ln->o, "%s: lost: /", ln->cmd);
	rep_out_text(ln->o, path);
	rep_out_end(ln->o);
	return 0;
}

/*
 * The files of this node that are lost, one 'e' line each (the first
 * CTL_LOST_NAMED), after one that says what it means.
 */
static void say_lost(struct rep_out *o, struct eng *e, const char *cmd,
		     uint64_t n)
{
	struct lost_names ln = { o, cmd };
	long total;

	if (n == 1)
		rep_out_line(o, 'e',
			     "%s: 1 file of this node is lost: no copy, parity "
			     "row or persisted copy of its data is left, so "
			     "it cannot come back (a write or an unlink of it "
			     "ends this)",
			     cmd);
	else
		rep_out_line(o, 'e',
			     "%s: %" PRIu64 " files of this node are lost: no "
			     "copy, parity row or persisted copy of their data "
			     "is left, so they cannot come back (a write or an "
			     "unlink of one ends this for it)",
			     cmd, n);
	total = eng_list_lost(e, true, CTL_LOST_NAMED, name_lost, &ln);
	if (total > CTL_LOST_NAMED)
		rep_out_line(o, 'e', "%s: ... and %ld more", cmd,
			     total - CTL_LOST_NAMED);
}

/* protect: holder @ps->stalled_holder refused, and why. */
static void say_stalled(struct rep_out *o, uint64_t left,
			const struct eng_protect_stats *ps)
{
	rep_out_line(o, 'e',
		     "protect: waiting: %" PRIu64 " files of this node are "
		     "not protected: node %d refused %s of %" PRIu64 " of "
		     "them (%s%s); tried again, sending only what it lacks",
		     left, ps->stalled_holder,
		     ps->copies ? "the copies" : "the parity folds",
		     ps->files_stalled, rfs_ctl_err_name(ps->stalled_err),
		     ps->stalled_err == -ENOSPC || ps->stalled_err == -ENOMEM
			     ? ": no memory for them there"
			     : "");
}

/*
 * Where protection (or the rebuild) stands: GW_DONE, GW_WAIT (not yet) or
 * GW_FAIL (it cannot finish now, and @o says why).  @done and @total are
 * the progress in files.  Files of this node that are lost end either
 * wait once the others are done (they never will be).  A holder that
 * refuses for want of memory is said (once per holder and reason: *@said)
 * and waited for: it may make room.
 */
static enum group_wait_state group_wait_state(struct rep_out *o,
			    struct eng *e, enum group_wait_kind k,
			    const struct eng_protect_stats *ps,
			    bool caught_up, uint64_t *total, uint64_t *done,
			    uint64_t *bytes, struct stall_said *said)
{
	/* Nothing is known, and no rebuild begun, before it caught up. */
	if (!caught_up) {
		*total = *done = *bytes = 0;
		return GW_WAIT;
	}
	if (k == WAIT_PROTECT) {
		uint64_t left = ps->files_unprotected > ps->files_pending
					? ps->files_unprotected
					: ps->files_pending;

		if (left > *total)
			*total = left;
		*done = *total - left;
		*bytes = 0;
		/*
		 * Rows here that count pieces a node lost with its memory
		 * leave other nodes' files short of their protection.
		 */
		if (left == 0 && ps->parity_stale && ps->holder_dead < 0)
			return GW_WAIT;
		if (left == 0 && ps->files_lost) {
			say_lost(o, e, "protect", ps->files_lost);
			return GW_FAIL;
		}
		if (left == 0)
			return GW_DONE;
		if (ps->holder_dead >= 0) {
			rep_out_line(o, 'e',
				     "protect: %" PRIu64 " files of this node "
				     "cannot be protected now: node %d, a "
				     "holder of its %s, is dead (tried "
				     "again once it is back or replaced)",
				     left, ps->holder_dead,
				     ps->copies ? "copies" : "parity rows");
			return GW_FAIL;
		}
		if (ps->files_stalled && ps->stalled_holder >= 0 &&
		    (said->holder != ps->stalled_holder ||
		     said->err != ps->stalled_err)) {
			say_stalled(o, left, ps);
			*said = (struct stall_said){ ps->stalled_holder,
						     ps->stalled_err };
		}
		return GW_WAIT;
	}
	*total = ps->rebuild_files;
	*done = ps->rebuild_done;
	*bytes = ps->rebuild_bytes;
	if (ps->rebuilding)
		return GW_WAIT;
	if (ps->files_lost) {
		say_lost(o, e, "rebuild", ps->files_lost);
		return GW_FAIL;
	}
	return GW_DONE;
}

enum { PW_COPIES, PW_SCHEME, PW_UNPROT, PW_PENDING, PW_PROTECTED,
       PW_HOLDER_DEAD, PW_FINISHED, PW_CAUGHT_UP, PW_LOST, PW_STALLED,
       PW_STALE, PW_N };

static const struct rep_field pw_fields[PW_N] = {
	[PW_COPIES] = REP_FIELD("copies", REP_COUNT),
	[PW_SCHEME] = REP_FIELD("scheme", REP_STRING),
	[PW_UNPROT] = REP_FIELD("unprotected", REP_COUNT),
	[PW_PENDING] = REP_FIELD("pending", REP_COUNT),
	[PW_PROTECTED] = REP_FIELD("protected_since_start", REP_COUNT),
	[PW_HOLDER_DEAD] = REP_FIELD("holder_dead", REP_INT),
	[PW_FINISHED] = REP_FIELD("finished", REP_BOOL),
	/* false: this node has not caught up with the group's log yet */
	[PW_CAUGHT_UP] = REP_FIELD("caught_up", REP_BOOL),
	[PW_LOST] = REP_FIELD("lost", REP_COUNT),
	[PW_STALLED] = REP_FIELD("stalled", REP_COUNT),
	/* xor, rs: pieces a node lost, still in rows here (to take out) */
	[PW_STALE] = REP_FIELD("parity_stale", REP_COUNT),
};

enum { RB_RUNNING, RB_FILES, RB_DONE, RB_NOT_BACK, RB_BYTES, RB_FINISHED,
       RB_CAUGHT_UP, RB_LOST, RB_N };

static const struct rep_field rb_fields[RB_N] = {
	[RB_RUNNING] = REP_FIELD("running", REP_BOOL),
	[RB_FILES] = REP_FIELD("files", REP_COUNT),
	[RB_DONE] = REP_FIELD("done", REP_COUNT),
	[RB_NOT_BACK] = REP_FIELD("not_back", REP_COUNT),
	[RB_BYTES] = REP_FIELD("bytes", REP_BYTES),
	[RB_FINISHED] = REP_FIELD("finished", REP_BOOL),
	[RB_CAUGHT_UP] = REP_FIELD("caught_up", REP_BOOL),
	[RB_LOST] = REP_FIELD("lost", REP_COUNT),
};

static const struct rep_field wait_roots[] = {
	REP_GROUP("protect", pw_fields, PW_N),
	REP_GROUP("rebuild", rb_fields, RB_N),
};

static const struct rep_text protect_text[] = {
	TXT("!caught_up", NULL,
	    "protect: waiting for this node to catch up with the group's "
	    "namespace log"),
	TXT("caught_up", NULL,
	    "protect: {scheme}, {unprotected} files of this node "
	    "not protected, {protected_since_start} protected since start"),
	TXT("caught_up&parity_stale", NULL,
	    "protect: {parity_stale} {parity_stale?piece|pieces} that a "
	    "node lost with its memory still counted in parity rows here: "
	    "being taken out"),
};

static const struct rep_text rebuild_text[] = {
	TXT("!caught_up", NULL,
	    "rebuild: waiting for this node to catch up with the group's "
	    "namespace log (the rebuild starts then)"),
	TXT("caught_up&running", NULL,
	    "rebuild: running, {done}/{files} files back, {bytes}, "
	    "{not_back} not back yet"),
	TXT("caught_up&!running&files", NULL,
	    "rebuild: done, {files} files, {bytes} brought back"),
	TXT("caught_up&lost", NULL,
	    "rebuild: {lost} files of this node lost: nowhere to bring "
	    "them back from"),
	TXT("caught_up&!running&!files", NULL,
	    "rebuild: nothing to bring back (this daemon did not start "
	    "with empty memory, or its node owned nothing)"),
};

static void group_wait_report(struct rep_out *o, bool json,
			      enum group_wait_kind k,
			      const struct eng_protect_stats *ps,
			      bool caught_up, bool done)
{
	struct rep *rep = rep_new(&wait_roots[k]);
	struct rep_obj *top;

	if (!rep) {
		o->err = -ENOMEM;
		return;
	}
	top = rep_top(rep);
	if (k == WAIT_PROTECT) {
		rep_set_u64(top, PW_COPIES, ps->copies);
		rep_set_str(top, PW_SCHEME, ps->scheme);
		rep_set_u64(top, PW_UNPROT, ps->files_unprotected);
		rep_set_u64(top, PW_PENDING, ps->files_pending);
		rep_set_u64(top, PW_PROTECTED, ps->files_protected);
		rep_set_int(top, PW_HOLDER_DEAD, ps->holder_dead);
		rep_set_bool(top, PW_FINISHED, done);
		rep_set_bool(top, PW_CAUGHT_UP, caught_up);
		rep_set_u64(top, PW_LOST, ps->files_lost);
		rep_set_u64(top, PW_STALLED, ps->files_stalled);
		rep_set_u64(top, PW_STALE, ps->parity_stale);
	} else {
		rep_set_bool(top, RB_RUNNING, ps->rebuilding);
		rep_set_u64(top, RB_FILES, ps->rebuild_files);
		rep_set_u64(top, RB_DONE, ps->rebuild_done);
		rep_set_u64(top, RB_NOT_BACK, ps->rebuild_failed);
		rep_set_u64(top, RB_BYTES, ps->rebuild_bytes);
		rep_set_bool(top, RB_FINISHED, done);
		rep_set_bool(top, RB_CAUGHT_UP, caught_up);
		rep_set_u64(top, RB_LOST, ps->files_lost);
	}
	if (rep_err(rep))
		o->err = rep_err(rep);
	else if (json)
		rep_json(o, rep);
	else if (k == WAIT_PROTECT)
		rep_text(o, rep, protect_text, 3, 0);
	else
		rep_text(o, rep, rebuild_text, 5, 0);
	rep_free(rep);
}

/* protect / rebuild [--wait]: the state, or progress until finished. */
static int group_wait(struct ctl_req *r, struct rep_out *o,
		      enum group_wait_kind k)
{
	static const char *const name[] = { "protect", "rebuild" };
	struct eng_protect_stats ps;
	uint64_t total = 0, done = 0, bytes = 0, sent_at = 0;
	uint64_t last[3] = { UINT64_MAX, 0, 0 };
	enum group_wait_state st;
	struct stall_said said = { -1, 0 };
	bool caught_up;
	int rc;

	if (!eng_in_group(r->e)) {
		rep_out_line(o, 'e', "%s: not a node of a group (no "
				     "--peers/--registry)", name[k]);
		return CTL_EXIT_FAIL;
	}
	eng_protect_stats(r->e, &ps);
	if (!ps.scheme[0]) {
		rep_out_line(o, 'e', "%s: this node runs --protect none",
			     name[k]);
		return CTL_EXIT_FAIL;
	}
	for (;;) {
		caught_up = eng_group_caught_up(r->e);
		st = group_wait_state(o, r->e, k, &ps, caught_up, &total,
				      &done, &bytes, &said);
		if (st == GW_FAIL)
			return CTL_EXIT_FAIL;
		if (!r->wait)
			break;
		if (st == GW_DONE || rft_now_ms() - sent_at >= CTL_BEAT_MS ||
		    last[0] != done || last[1] != total || last[2] != bytes) {
			rep_out_line(o, 'p',
				     "%" PRIu64 " %" PRIu64 " %" PRIu64
				     " 0 %s",
				     done, total, bytes, name[k]);
			if (rfs_ctl_send(r, o))
				return CTL_GONE;
			sent_at = rft_now_ms();
			last[0] = done;
			last[1] = total;
			last[2] = bytes;
		}
		if (st == GW_DONE)
			break;
		rc = rfs_ctl_nap(r, CTL_POLL_MS);
		if (rc == -ESHUTDOWN) {
			rep_out_line(o, 'e', "%s: reftfsd is stopping",
				     name[k]);
			return CTL_EXIT_FAIL;
		}
		if (rc < 0)
			return CTL_GONE;
		eng_protect_stats(r->e, &ps);
	}
	group_wait_report(o, r->json, k, &ps, caught_up, st == GW_DONE);
	return CTL_EXIT_OK;
}

int rfs_ctl_cmd_protect(struct ctl_req *r, struct rep_out *o)
{
	return group_wait(r, o, WAIT_PROTECT);
}

int rfs_ctl_cmd_rebuild(struct ctl_req *r, struct rep_out *o)
{
	return group_wait(r, o, WAIT_REBUILD);
}
