/*
 * ctl_verify.c - "verify": the checksums of the files under a path
 * computed again where their pieces are held, here and on the nodes with
 * copies, and, with --repair, bad pieces put right (eng_verify()).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "ctl_i.h"
#include "report.h"

enum { VC_PATH, VC_NODE, VC_RESULT, VC_PIECES, VC_BAD, VC_FIRST_BAD,
       VC_ABSENT, VC_BYTES, VC_REPAIRED, VC_REPAIR_ERR, VC_OFF,
       VC_SEAL_DIFFERS, VC_N };

static const struct rep_field vc_fields[VC_N] = {
	[VC_PATH] = REP_FIELD("path", REP_STRING),
	/* null without a group */
	[VC_NODE] = REP_FIELD("node", REP_INT),
	/* ok, bad, repaired (here: read back from a good copy), resending
	   (a holder's bad pieces dropped, sent again: protect --wait),
	   off seal (it shows other checksums than the group's seal),
	   other seal (its record of the seal differs), resynced (it was
	   off, and shows the seal again), writing (not checked), down,
	   stale (that node holds another seal), no answer, or why it
	   could not be checked */
	[VC_RESULT] = REP_FIELD("result", REP_STRING),
	[VC_PIECES] = REP_FIELD("pieces_checked", REP_COUNT),
	[VC_BAD] = REP_FIELD("pieces_bad", REP_COUNT),
	[VC_FIRST_BAD] = REP_FIELD("first_bad_piece", REP_COUNT),
	[VC_ABSENT] = REP_FIELD("pieces_absent", REP_COUNT),
	[VC_BYTES] = REP_FIELD("bytes_checked", REP_BYTES),
	[VC_REPAIRED] = REP_FIELD("pieces_repaired", REP_COUNT),
	/* why bad pieces were not repaired, with --repair */
	[VC_REPAIR_ERR] = REP_FIELD("repair_error", REP_STRING),
	/* in a group: what that node shows (piece checksums, size) that
	   differs from the group's seal of the file, and whether its
	   record of that seal differs from this node's */
	[VC_OFF] = REP_FIELD("off_seal", REP_COUNT),
	[VC_SEAL_DIFFERS] = REP_FIELD("seal_differs", REP_BOOL),
};

enum { VF_FILES, VF_WRITING, VF_COPIES, VF_UNCHECKED, VF_PIECES, VF_BAD,
       VF_REPAIRED, VF_BYTES, VF_STRIPED, VF_ROWS, VF_ROWS_BAD,
       VF_ROWS_UNCHECKED, VF_TABLE, VF_N };

static const struct rep_field vf_fields[VF_N] = {
	[VF_FILES] = REP_FIELD("files", REP_COUNT),
	[VF_WRITING] = REP_FIELD("files_writing", REP_COUNT),
	[VF_COPIES] = REP_FIELD("copies_checked", REP_COUNT),
	[VF_UNCHECKED] = REP_FIELD("copies_unchecked", REP_COUNT),
	[VF_PIECES] = REP_FIELD("pieces_checked", REP_COUNT),
	[VF_BAD] = REP_FIELD("pieces_bad", REP_COUNT),
	[VF_REPAIRED] = REP_FIELD("pieces_repaired", REP_COUNT),
	[VF_BYTES] = REP_FIELD("bytes_checked", REP_BYTES),
	/* xor, rs: parity rows of the files' stripes encoded anew from
	   their members and compared (scrub); null without parity */
	[VF_STRIPED] = REP_FIELD("parity_scrubbed", REP_BOOL),
	[VF_ROWS] = REP_FIELD("parity_rows_checked", REP_COUNT),
	[VF_ROWS_BAD] = REP_FIELD("parity_rows_bad", REP_COUNT),
	[VF_ROWS_UNCHECKED] = REP_FIELD("parity_rows_unchecked", REP_COUNT),
	[VF_TABLE] = { .key = "copies", .type = REP_TABLE,
		       .fields = vc_fields, .n = VC_N },
};

static const struct rep_field vf_root = REP_GROUP("verify", vf_fields, VF_N);

static const struct rep_col vc_cols[] = {
	{ "", "NODE", 4, 0 },	  { "  ", "RESULT", -9, 0 },
	{ "  ", "PIECES", 6, 0 }, { "  ", "BAD", 5, 0 },
	{ "  ", "ABSENT", 6, 0 }, { "  ", "PATH", 0, 0 },
};

/* Unset cells (no group, nothing checked) read "-". */
static const struct rep_row_text vc_rows[] = {
	{ NULL, (const char *const[]){ "{node}", "{result}",
				       "{pieces_checked}", "{pieces_bad}",
				       "{pieces_absent}", "{path}" } },
};

static const struct rep_table_text vc_table = { "copies", vc_cols, 6,
						vc_rows, 1 };

static const struct rep_text vf_text[] = {
	TABLE("copies", &vc_table),
	TXT(NULL, NULL,
	    "{files} {files?file|files}: {copies_checked} {copies_checked?"
	    "copy|copies} checked, {pieces_checked} {pieces_checked?piece|"
	    "pieces} ({bytes_checked}), {pieces_bad} bad"),
	TXT("parity_scrubbed", NULL,
	    "parity: {parity_rows_checked} {parity_rows_checked?row|rows} "
	    "matched against their stripes' members, {parity_rows_bad} bad, "
	    "{parity_rows_unchecked} not checked"),
	TXT("pieces_repaired", NULL,
	    "{pieces_repaired} bad {pieces_repaired?piece|pieces} put right "
	    "(copies sent again go out in the background: protect --wait)"),
	TXT("files_writing", NULL,
	    "{files_writing} {files_writing?file is|files are} being "
	    "written: not checked"),
};

struct verify_sum {
	struct rep *rep;
	int self; /* this node; -1 without a group */
	uint64_t files, writing, copies, unchecked, pieces, bad, repaired;
	uint64_t disagree; /* copies off the group's seal, not resynced */
	uint64_t bytes;
	bool striped;
	uint64_t rows, rows_bad, rows_unchecked;
};

static const char *verify_result(const struct eng_verify_copy *vc, int self)
{
	if (vc->rc == 0 && (vc->off || vc->seal_differs))
		return vc->seal_differs ? "other seal"
		       : vc->synced	? "resynced"
					: "off seal";
	if (vc->rc == 0 && vc->bad && vc->repaired == vc->bad)
		return vc->node == self ? "repaired" : "resending";
	if (vc->rc == 0)
		return vc->bad ? "bad" : "ok";
	switch (-vc->rc) {
	case EBUSY:
		return "writing";
	case EHOSTDOWN:
		return "down";
	case ESTALE:
		return "stale";
	case ETIMEDOUT:
		return "no answer";
	case ENOENT:
		return "gone";
	default:
		return rfs_ctl_err_name(vc->rc);
	}
}

static int verify_row(void *ctx, const struct eng_verify_info *vi)
{
	struct verify_sum *sum = ctx;
	char path[PATH_MAX + 2];

	snprintf(path, sizeof(path), "/%s", vi->path);
	sum->files++;
	if (!vi->sealed) {
		struct rep_obj *row = rep_row(sum->rep, rep_top(sum->rep),
					      VF_TABLE);

		sum->writing++;
		if (!row)
			return 1;
		rep_set_str(row, VC_PATH, path);
		rep_set_str(row, VC_RESULT, "writing");
		return rep_err(sum->rep) ? 1 : 0;
	}
	for (unsigned i = 0; i < vi->ncopies; i++) {
		const struct eng_verify_copy *vc = &vi->copy[i];
		struct rep_obj *row = rep_row(sum->rep, rep_top(sum->rep),
					      VF_TABLE);

		if (!row)
			return 1;
		rep_set_str(row, VC_PATH, path);
		if (vc->node >= 0)
			rep_set_int(row, VC_NODE, vc->node);
		rep_set_str(row, VC_RESULT, verify_result(vc, sum->self));
		if (vc->rc < 0) {
			sum->unchecked++;
			continue;
		}
		sum->copies++;
		if (vc->seal_differs || (vc->off && !vc->synced))
			sum->disagree++;
		if (vc->off || vc->seal_differs) {
			rep_set_u64(row, VC_OFF, vc->off);
			rep_set_bool(row, VC_SEAL_DIFFERS, vc->seal_differs);
		}
		sum->pieces += vc->checked;
		sum->bad += vc->bad;
		sum->repaired += vc->repaired;
		sum->bytes += vc->bytes;
		if (vc->bad && vc->repaired)
			rep_set_u64(row, VC_REPAIRED, vc->repaired);
		if (vc->repair_rc < 0)
			rep_set_str(row, VC_REPAIR_ERR,
				    vc->repair_rc == -ENODATA
					    ? "no good copy to repair from"
				    : vc->repair_rc == -EOPNOTSUPP
					    ? "a copy held for the owner: "
					      "repair it there"
					    : rfs_ctl_err_name(vc->repair_rc));
		rep_set_u64(row, VC_PIECES, vc->checked);
		rep_set_u64(row, VC_BAD, vc->bad);
		if (vc->bad)
			rep_set_u64(row, VC_FIRST_BAD, vc->first_bad);
		rep_set_u64(row, VC_ABSENT, vc->absent);
		rep_set_u64(row, VC_BYTES, vc->bytes);
	}
	if (vi->striped) {
		sum->striped = true;
		sum->rows += vi->rows_checked;
		sum->rows_bad += vi->rows_bad;
		sum->rows_unchecked += vi->rows_unchecked;
	}
	if (vi->rows_bad || vi->rows_unchecked) {
		/* A row for the file's parity: the first bad stripe. */
		struct rep_obj *row = rep_row(sum->rep, rep_top(sum->rep),
					      VF_TABLE);

		if (!row)
			return 1;
		rep_set_str(row, VC_PATH, path);
		rep_set_str(row, VC_RESULT, vi->rows_bad ? "parity bad"
							 : "parity unchecked");
		rep_set_u64(row, VC_PIECES, vi->rows_checked);
		rep_set_u64(row, VC_BAD, vi->rows_bad);
		if (vi->rows_bad)
			rep_set_u64(row, VC_FIRST_BAD, vi->first_bad_stripe);
	}
	return rep_err(sum->rep) ? 1 : 0;
}

/*
 * verify [PATH]: recompute the CRC32C of every piece of the files under
 * PATH where it is held: here, and on each node with a copy.  Exit 1 when
 * a piece is bad or a copy could not be checked.
 */
int rfs_ctl_cmd_verify(struct ctl_req *r, struct rep_out *o)
{
	char rel[RFS_CTL_MAX_LINE + 1];
	struct verify_sum sum = { 0 };
	struct rep_obj *top;
	int rc;

	rc = rfs_ctl_path_ready(r, o, "verify", rel, sizeof(rel));
	if (rc != CTL_EXIT_OK)
		return rc;
	sum.rep = rep_new(&vf_root);
	if (!sum.rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	sum.self = r->g ? eng_get_config(r->e)->node : -1;
	rc = eng_verify(r->e, rel, r->repair, verify_row, &sum);
	if (rfs_ctl_list_failed(o, sum.rep, rc, "verify", rel))
		return CTL_EXIT_FAIL;
	top = rep_top(sum.rep);
	rep_set_u64(top, VF_FILES, sum.files);
	rep_set_u64(top, VF_WRITING, sum.writing);
	rep_set_u64(top, VF_COPIES, sum.copies);
	rep_set_u64(top, VF_UNCHECKED, sum.unchecked);
	rep_set_u64(top, VF_PIECES, sum.pieces);
	rep_set_u64(top, VF_BAD, sum.bad);
	rep_set_u64(top, VF_REPAIRED, sum.repaired);
	rep_set_u64(top, VF_BYTES, sum.bytes);
	rep_set_bool(top, VF_STRIPED, sum.striped);
	if (sum.striped) {
		rep_set_u64(top, VF_ROWS, sum.rows);
		rep_set_u64(top, VF_ROWS_BAD, sum.rows_bad);
		rep_set_u64(top, VF_ROWS_UNCHECKED, sum.rows_unchecked);
	}
	if (rep_err(sum.rep)) {
		o->err = rep_err(sum.rep);
		rep_free(sum.rep);
		return CTL_EXIT_FAIL;
	}
	if (r->json)
		rep_json(o, sum.rep);
	else
		rep_text(o, sum.rep, vf_text,
			 (unsigned)(sizeof(vf_text) / sizeof(vf_text[0])), 0);
	rep_free(sum.rep);
	if (sum.bad > sum.repaired)
		rep_out_line(o, 'e',
			     "verify: %" PRIu64 " bad %s: their bytes differ "
			     "from the checksums of their seal%s",
			     sum.bad - sum.repaired,
			     sum.bad - sum.repaired == 1 ? "piece" : "pieces",
			     r->repair ? " (not repaired: see repair_error "
					 "in --json)"
				       : "; --repair puts them right where a "
					 "good copy is");
	if (sum.unchecked)
		rep_out_line(o, 'e',
			     "verify: %" PRIu64 " %s could not be checked "
			     "(RESULT says why)",
			     sum.unchecked, sum.unchecked == 1 ? "copy" : "copies");
	if (sum.disagree)
		rep_out_line(o, 'e',
			     "verify: %" PRIu64 " %s other checksums than "
			     "the group's seal of the file (the nodes "
			     "disagree)%s",
			     sum.disagree,
			     sum.disagree == 1 ? "node records" : "nodes record",
			     r->repair ? "" : "; --repair has them show the "
					      "seal again");
	if (sum.rows_bad)
		rep_out_line(o, 'e',
			     "verify: %" PRIu64 " parity %s not match the "
			     "members of their stripes (a read that needs "
			     "them fails its checksum: EIO or the persist dir)",
			     sum.rows_bad,
			     sum.rows_bad == 1 ? "row does" : "rows do");
	return sum.bad > sum.repaired || sum.unchecked || sum.rows_bad ||
			       sum.rows_unchecked || sum.disagree
		       ? CTL_EXIT_FAIL
		       : CTL_EXIT_OK;
}
