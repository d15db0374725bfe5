/*
 * ctl_flush.c - "flush": write back to the persist tier everything sealed
 * now (eng_flush_request()); with --wait, its progress streamed until it
 * finishes.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "ctl_i.h"
#include "report.h"

enum {
	FL_TICKET,
	FL_FILES_DONE,
	FL_FILES_TOTAL,
	FL_BYTES_DONE,
	FL_BYTES_TOTAL,
	FL_FINISHED,
	FL_ERROR,
	FL_N
};

static const struct rep_field flush_fields[FL_N] = {
	[FL_TICKET] = REP_FIELD("ticket", REP_COUNT),
	[FL_FILES_DONE] = REP_FIELD("files_done", REP_COUNT),
	[FL_FILES_TOTAL] = REP_FIELD("files_total", REP_COUNT),
	[FL_BYTES_DONE] = REP_FIELD("bytes_done", REP_BYTES),
	[FL_BYTES_TOTAL] = REP_FIELD("bytes_total", REP_BYTES),
	[FL_FINISHED] = REP_FIELD("finished", REP_BOOL),
	[FL_ERROR] = REP_FIELD("error", REP_STRING),
};

static const struct rep_field flush_root =
	REP_GROUP("flush", flush_fields, FL_N);

static const struct rep_text flush_requested[] = {
	TXT(NULL, NULL,
	    "flush requested (ticket {ticket}): {files_total} files, "
	    "{bytes_total} to write back"),
};

static const struct rep_text flush_finished[] = {
	TXT(NULL, NULL,
	    "flush finished: {files_done} files, {bytes_done} written back"),
};

/* The state of @ticket, as JSON or by @text. */
static void flush_report(struct rep_out *o, bool json,
			 const struct rep_text *text, uint64_t ticket,
			 const struct eng_flush_progress *p)
{
	struct rep *rep = rep_new(&flush_root);
	struct rep_obj *top;

	if (!rep) {
		o->err = -ENOMEM;
		return;
	}
	top = rep_top(rep);
	rep_set_u64(top, FL_TICKET, ticket);
	rep_set_u64(top, FL_FILES_DONE, p->files_done);
	rep_set_u64(top, FL_FILES_TOTAL, p->files_total);
	rep_set_u64(top, FL_BYTES_DONE, p->bytes_done);
	rep_set_u64(top, FL_BYTES_TOTAL, p->bytes_total);
	rep_set_bool(top, FL_FINISHED, p->finished);
	if (p->error)
		rep_set_str(top, FL_ERROR, rfs_ctl_err_name(p->error));
	if (rep_err(rep))
		o->err = rep_err(rep);
	else if (json)
		rep_json(o, rep);
	else
		rep_text(o, rep, text, 1, 0);
	rep_free(rep);
}

static int flush_wait(struct ctl_req *r, struct rep_out *o, uint64_t ticket)
{
	struct eng *e = r->e;
	struct eng_flush_progress p, last = { 0 };
	struct eng_stats st;
	uint64_t sent_at = 0;
	bool sent = false;
	int rc;

	for (;;) {
		memset(&p, 0, sizeof(p));
		rc = eng_flush_progress(e, ticket, &p);
		if (rc < 0) {
			rep_out_line(o, 'e',
				     "flush: progress of ticket %" PRIu64
				     ": %s",
				     ticket, rfs_ctl_err_name(rc));
			return CTL_EXIT_FAIL;
		}
		if (!sent || p.finished ||
		    rft_now_ms() - sent_at >= CTL_BEAT_MS ||
		    p.files_done != last.files_done ||
		    p.files_total != last.files_total ||
		    p.bytes_done != last.bytes_done ||
		    p.bytes_total != last.bytes_total) {
			rep_out_line(o, 'p',
				     "%" PRIu64 " %" PRIu64 " %" PRIu64
				     " %" PRIu64,
				     p.files_done, p.files_total, p.bytes_done,
				     p.bytes_total);
			if (rfs_ctl_send(r, o))
				return CTL_GONE;
			sent = true;
			sent_at = rft_now_ms();
			last = p;
		}
		if (p.finished)
			break;
		rc = rfs_ctl_nap(r, CTL_POLL_MS);
		if (rc == -ESHUTDOWN) {
			rep_out_line(o, 'e', "flush: reftfsd is stopping; the "
					     "write-back goes on without this "
					     "client");
			return CTL_EXIT_FAIL;
		}
		if (rc < 0)
			return CTL_GONE;
	}
	if (r->json)
		flush_report(o, true, NULL, ticket, &p);
	if (p.error) {
		rep_out_line(o, 'e', "flush failed: %s",
			     rfs_ctl_err_name(p.error));
		memset(&st, 0, sizeof(st));
		eng_get_stats(e, &st);
		st.persist_last_error[sizeof(st.persist_last_error) - 1] = 0;
		if (st.persist_last_error[0]) {
			rep_out_begin(o, 'e');
			rep_out_str(o, "last persist error: ");
			rep_out_text(o, st.persist_last_error);
			rep_out_end(o);
		}
		return CTL_EXIT_FAIL;
	}
	if (!r->json)
		flush_report(o, false, flush_finished, ticket, &p);
	return CTL_EXIT_OK;
}

int rfs_ctl_cmd_flush(struct ctl_req *r, struct rep_out *o)
{
	struct eng *e = r->e;
	struct eng_flush_progress p;
	struct eng_stats st;
	uint64_t ticket = 0;
	int rc;

	memset(&st, 0, sizeof(st));
	eng_get_stats(e, &st);
	if (!st.persist_enabled) {
		rep_out_line(o, 'e', "flush: no persist tier (reftfsd runs "
				     "without --persist)");
		return CTL_EXIT_FAIL;
	}
	rc = eng_flush_request(e, &ticket);
	if (rc < 0) {
		rep_out_line(o, 'e', "flush: %s", rfs_ctl_err_name(rc));
		return CTL_EXIT_FAIL;
	}
	if (r->wait)
		return flush_wait(r, o, ticket);
	memset(&p, 0, sizeof(p));
	rc = eng_flush_progress(e, ticket, &p);
	if (rc < 0) {
		rep_out_line(o, 'e',
			     "flush: progress of ticket %" PRIu64 ": %s",
			     ticket, rfs_ctl_err_name(rc));
		return CTL_EXIT_FAIL;
	}
	flush_report(o, r->json, flush_requested, ticket, &p);
	return CTL_EXIT_OK;
}
