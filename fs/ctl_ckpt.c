/*
 * ctl_ckpt.c - "checkpoints" and "wait": where each checkpoint stands, file
 * by file, and a wait for a checkpoint (or any file or tree) to get there.
 *
 * A checkpoint's files are counted up the states (struct eng_ckpt_info):
 * sealed counts the protected and persisted ones too, protected the
 * persisted ones, since each is safe against what the weaker one is.  A
 * checkpoint is wholly protected when it has files and every one survives
 * the loss of a node; "checkpoints" names the newest such one, and the
 * newest wholly persisted, which is what a loader after a failure wants.
 * A checkpoint with a lost file is incomplete, for good: "wait" says so at
 * once rather than wait for what cannot come.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_i.h"
#include "report.h"
#include "rft_clock.h"

/* --- checkpoints --------------------------------------------------------- */

enum { CKS_LIST, CKS_PROTECTED, CKS_PERSISTED, CKS_N };

static const struct rep_field cks_fields[CKS_N] = {
	[CKS_LIST] = {
		.key = "checkpoints",
		.type = REP_TABLE,
		.label = "checkpoint",
		.fields = rfs_ctl_ckpt_fields,
		.n = CK_N,
	},
	[CKS_PROTECTED] = REP_FIELD("newest_protected", REP_STRING),
	[CKS_PERSISTED] = REP_FIELD("newest_persisted", REP_STRING),
};

static const struct rep_field cks_root =
	REP_GROUP("checkpoints", cks_fields, CKS_N);

static const struct rep_col cks_cols[] = {
	{ "", "CHECKPOINT", -10, 40 }, { " ", "SEQ", 6, 0 },
	{ "  ", "STATE", -10, 0 },     { "  ", "FILES", 6, 0 },
	{ "  ", "BYTES", 10, 0 },      { "  ", "WRITING", 7, 0 },
	{ "  ", "SEALED", 6, 0 },      { "  ", "PROTECTED", 9, 0 },
	{ "  ", "PERSISTED", 9, 0 },   { "  ", "FLAGS", 0, 0 },
};

static const struct rep_row_text cks_rows[] = {
	{ "lost_files",
	  (const char *const[]){ "{name}", "{seq}", "{state}", "{files}",
				 "{bytes}", "{writing_files}",
				 "{sealed_files}", "{protected_files}",
				 "{persisted_files}",
				 "{flags}  {lost_files} lost" } },
	{ NULL, (const char *const[]){ "{name}", "{seq}", "{state}", "{files}",
				       "{bytes}", "{writing_files}",
				       "{sealed_files}", "{protected_files}",
				       "{persisted_files}", "{flags}" } },
};

static const struct rep_table_text cks_table = {
	"checkpoints", cks_cols, 10, cks_rows, 2
};

static const struct rep_text cks_text[] = {
	TXT("!checkpoints", NULL, "no checkpoints"),
	TABLE("checkpoints", &cks_table),
	TXT("checkpoints&newest_protected", NULL,
	    "newest wholly protected: {newest_protected}"),
	TXT("checkpoints&!newest_protected", NULL,
	    "no checkpoint is wholly protected"),
	TXT("checkpoints&newest_persisted", NULL,
	    "newest wholly persisted: {newest_persisted}"),
	TXT("checkpoints&!newest_persisted", NULL,
	    "no checkpoint is wholly persisted"),
};

struct cks_walk {
	struct rep *rep;
	char *protected, *persisted; /* the newest so far (oldest first) */
};

/* Every file of it at @st or stronger, and at least one file. */
static bool wholly(const struct eng_ckpt_info *ci, enum eng_state st)
{
	return ci->files && ci->state >= st;
}

static int cks_row(void *ctx, const struct eng_ckpt_info *ci)
{
	struct cks_walk *w = ctx;
	struct rep_obj *row = rep_row(w->rep, rep_top(w->rep), CKS_LIST);
	char **newest[] = { &w->protected, &w->persisted };
	const enum eng_state st[] = { ENG_STATE_PROTECTED,
				      ENG_STATE_PERSISTED };

	if (!row)
		return 1;
	rfs_ctl_ckpt_fill(row, ci);
	for (unsigned i = 0; i < 2; i++) {
		if (!wholly(ci, st[i]))
			continue;
		free(*newest[i]);
		if (!(*newest[i] = strdup(ci->name ? ci->name : "")))
			return -ENOMEM;
	}
	return 0;
}

int rfs_ctl_cmd_checkpoints(struct ctl_req *r, struct rep_out *o)
{
	struct cks_walk w = { rep_new(&cks_root), NULL, NULL };
	int rc;

	if (!w.rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	rc = eng_list_checkpoints(r->e, cks_row, &w);
	rep_set_str(rep_top(w.rep), CKS_PROTECTED, w.protected);
	rep_set_str(rep_top(w.rep), CKS_PERSISTED, w.persisted);
	free(w.protected);
	free(w.persisted);
	if (rfs_ctl_list_failed(o, w.rep, rc < 0 ? rc : 0, "checkpoints", ""))
		return CTL_EXIT_FAIL;
	if (r->json)
		rep_json(o, w.rep);
	else
		rep_text(o, w.rep, cks_text,
			 sizeof(cks_text) / sizeof(cks_text[0]), 0);
	rep_free(w.rep);
	return CTL_EXIT_OK;
}

/* --- wait ---------------------------------------------------------------- */

enum { WT_PATH, WT_WANT, WT_REACHED, WT_WAITED, WT_STATE, WT_N };

static const struct rep_field wt_fields[WT_N] = {
	[WT_PATH] = REP_FIELD("path", REP_STRING),
	[WT_WANT] = {
		.key = "want",
		.type = REP_ENUM,
		.n = NSTATES,
		.name_of = rfs_ctl_state_of,
	},
	[WT_REACHED] = REP_FIELD("reached", REP_BOOL),
	[WT_WAITED] = REP_FIELD("waited_seconds", REP_SECONDS),
	[WT_STATE] = REP_GROUP("now", rfs_ctl_ckpt_fields, CK_N),
};

static const struct rep_field wt_root = REP_GROUP("wait", wt_fields, WT_N);

static const struct rep_text wt_text[] = {
	TXT("reached", NULL,
	    "/{path}: {want}: {now.files} file{now.files?|s} "
	    "({now.bytes}) after {waited_seconds}"),
	TXT("!reached", NULL,
	    "/{path}: not {want} after {waited_seconds}: {now.state}, "
	    "{now.files} file{now.files?|s} ({now.bytes}): "
	    "{now.writing_files} writing, {now.sealed_files} sealed, "
	    "{now.protected_files} protected, {now.persisted_files} "
	    "persisted, {now.lost_files} lost"),
};

static void wt_report(struct ctl_req *r, struct rep_out *o, const char *rel,
		      const struct eng_ckpt_info *ci, bool reached,
		      uint64_t waited_ms)
{
	struct rep *rep = rep_new(&wt_root);
	struct rep_obj *top;

	if (!rep) {
		o->err = -ENOMEM;
		return;
	}
	top = rep_top(rep);
	rep_set_str(top, WT_PATH, rel);
	rep_set_u64(top, WT_WANT, (uint64_t)r->want);
	rep_set_bool(top, WT_REACHED, reached);
	rep_set_u64(top, WT_WAITED, waited_ms / 1000);
	rfs_ctl_ckpt_fill(rep_obj(top, WT_STATE), ci);
	if (rep_err(rep))
		o->err = rep_err(rep);
	else if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, wt_text, 2, 0);
	rep_free(rep);
}

int rfs_ctl_cmd_wait(struct ctl_req *r, struct rep_out *o)
{
	struct eng_ckpt_info ci;
	const char *in_mount;
	char rel[PATH_MAX];
	uint64_t start = rft_now_ms(), now, there, sent_at = 0;
	uint64_t last[2] = { UINT64_MAX, 0 };
	int rc;

	if (!r->path || r->want < 0) {
		rep_out_line(o, 'e', "usage: wait %s", r->cmd->usage);
		return CTL_EXIT_USAGE;
	}
	/* A path under the mount point, as a job script has it, is the
	 * same path from the mount root. */
	in_mount = rfs_ctl_in_mount(r);
	if (in_mount)
		r->path = *in_mount ? in_mount : "/";
	rc = rfs_ctl_path_ready(r, o, "wait", rel, sizeof(rel));
	if (rc != CTL_EXIT_OK)
		return rc;
	for (;;) {
		rc = eng_path_state(r->e, rel, &ci);
		if (rc < 0) {
			rep_out_line(o, 'e', "wait: /%s: %s", rel,
				     rfs_ctl_err_name(rc));
			return CTL_EXIT_FAIL;
		}
		now = rft_now_ms();
		/* Lost is for good: it will never get there. */
		if (ci.files_lost) {
			wt_report(r, o, rel, &ci, false, now - start);
			rep_out_line(o, 'e',
				     "wait: /%s: incomplete: %" PRIu64
				     " file%s lost (reftfs-admin ls says "
				     "which)",
				     rel, ci.files_lost,
				     ci.files_lost == 1 ? "" : "s");
			return CTL_EXIT_FAIL;
		}
		if (ci.files && ci.state >= (enum eng_state)r->want) {
			wt_report(r, o, rel, &ci, true, now - start);
			return CTL_EXIT_OK;
		}
		if (r->timeout_ms && now - start >= r->timeout_ms) {
			wt_report(r, o, rel, &ci, false, now - start);
			return CTL_EXIT_TIMEOUT;
		}
		/* Progress, and a record at least every CTL_BEAT_MS: the
		 * client gives up on a daemon that says nothing. */
		there = r->want == ENG_STATE_PERSISTED ? ci.files_persisted
			: r->want == ENG_STATE_PROTECTED ? ci.files_protected
							  : ci.files_sealed;
		if (now - sent_at >= CTL_BEAT_MS || last[0] != there ||
		    last[1] != ci.files) {
			rep_out_line(o, 'p',
				     "%" PRIu64 " %" PRIu64 " 0 0 wait", there,
				     ci.files);
			if (rfs_ctl_send(r, o))
				return CTL_GONE;
			sent_at = now;
			last[0] = there;
			last[1] = ci.files;
		}
		rc = rfs_ctl_nap(r, CTL_POLL_MS);
		if (rc == -ESHUTDOWN) {
			rep_out_line(o, 'e', "wait: reftfsd is stopping");
			return CTL_EXIT_FAIL;
		}
		if (rc < 0)
			return CTL_GONE;
	}
}
