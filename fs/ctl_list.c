/*
 * ctl_list.c - "ls" and "placement": what the engine lists under a path,
 * the files (state, size, tier, checksum, the nodes with their data), the
 * directories (the files below each, counted by state as "checkpoints"
 * counts them) and the pieces of one file (where each is, here and in the
 * group).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ctl_i.h"
#include "report.h"

static const char *crc_name(enum eng_crc_state s)
{
	const char *n = eng_crc_state_name(s);

	return n ? n : "unknown";
}

#define NCRCS (ENG_CRC_BAD + 1)

static const char *crc_of(unsigned s)
{
	return crc_name((enum eng_crc_state)s);
}

/* --- ls ----------------------------------------------------------------- */

enum {
	LS_PATH,
	LS_TYPE,
	LS_INO,
	LS_MODE,
	LS_SIZE,
	LS_MTIME,
	LS_MTIME_NSEC,
	LS_STATE,
	LS_CRC,
	LS_TIER,
	LS_CHUNKS,
	LS_RESIDENT,
	LS_IN_PERSIST,
	LS_OWNER,
	LS_HOLDERS,
	LS_TREE,
	LS_N
};

/* The last six are a file's; null for anything else. */
static const struct rep_field ls_fields[LS_N] = {
	[LS_PATH] = REP_FIELD("path", REP_STRING),
	[LS_TYPE] = REP_FIELD("type", REP_STRING),
	[LS_INO] = REP_FIELD("ino", REP_COUNT),
	[LS_MODE] = REP_FIELD("mode", REP_STRING),
	[LS_SIZE] = REP_FIELD("size", REP_BYTES),
	[LS_MTIME] = REP_FIELD("mtime", REP_INT),
	[LS_MTIME_NSEC] = REP_FIELD("mtime_nsec", REP_INT),
	[LS_STATE] = {
		.key = "state",
		.type = REP_ENUM,
		.n = NSTATES,
		.name_of = rfs_ctl_state_of,
	},
	[LS_CRC] = {
		.key = "checksum",
		.type = REP_ENUM,
		.n = NCRCS,
		.name_of = crc_of,
	},
	[LS_TIER] = REP_FIELD("tier", REP_STRING),
	[LS_CHUNKS] = REP_FIELD("chunks", REP_COUNT),
	[LS_RESIDENT] = REP_FIELD("chunks_resident", REP_COUNT),
	[LS_IN_PERSIST] = REP_FIELD("in_persist", REP_BOOL),
	/* In a group: the owner node, and "0,2": the nodes with its data. */
	[LS_OWNER] = REP_FIELD("owner", REP_INT),
	[LS_HOLDERS] = REP_FIELD("holders", REP_STRING),
	/* A directory's: the files below it, as "checkpoints" has them. */
	[LS_TREE] = REP_GROUP("tree", rfs_ctl_ckpt_fields, CK_N),
};

static const struct rep_field ls_root = {
	.key = "entries",
	.type = REP_TABLE,
	.fields = ls_fields,
	.n = LS_N,
};

static const struct rep_col ls_cols[] = {
	{ "", "STATE", -9, 0 },	   { "  ", "SIZE", 13, 0 },
	{ "  ", "TIER", -11, 0 },	   { "  ", "CHECKSUM", -10, 0 },
	{ "  ", "CHUNKS", 13, 0 },	   { "  ", "NODES", -5, 0 },
	{ "  ", "PATH", 0, 0 },
};

/* NODES: the owner, then the other nodes that hold the data ("1+2"). */
static const struct rep_row_text ls_rows[] = {
	{ "state&holders", (const char *const[]){ "{state}", "{size:n}",
						  "{tier}", "{checksum}",
						  "{chunks_resident}/{chunks}",
						  "{holders}", "{path}" } },
	{ "state", (const char *const[]){ "{state}", "{size:n}", "{tier}",
					  "{checksum}",
					  "{chunks_resident}/{chunks}", "-",
					  "{path}" } },
	/* A directory: the weakest state of the files below it, and their
	   bytes; "dir" when there are none. */
	{ "type=dir&tree.files",
	  (const char *const[]){ "{tree.state}", "{tree.bytes:n}", "-", "-",
				 "-", "-", "{path}/" } },
	{ "type=dir",
	  (const char *const[]){ "dir", "-", "-", "-", "-", "-", "{path}/" } },
	{ NULL,
	  (const char *const[]){ "{type}", "{size:n}", "-", "-", "-", "-",
				 "{path}" } },
};

static const struct rep_table_text ls_table = { NULL, ls_cols, 7, ls_rows,
						5 };

static const struct rep_text ls_text[] = {
	TABLE(NULL, &ls_table),
};

static const char *type_name(mode_t mode)
{
	if (S_ISREG(mode))
		return "file";
	if (S_ISDIR(mode))
		return "dir";
	if (S_ISLNK(mode))
		return "symlink";
	return "other";
}

/* "OWNER+N+M": a group's file's owner, then the other nodes with its data. */
static void nodes_text(const struct eng_entry_info *ei, char *buf,
		       size_t size)
{
	size_t len = (size_t)snprintf(buf, size, "%d", ei->owner);

	for (int n = 0; n < 64 && len < size; n++)
		if (n != ei->owner && (ei->holders & (1ULL << n)))
			len += (size_t)snprintf(buf + len, size - len, "+%d",
						n);
}

static void ls_set_nodes(struct rep_obj *row, const struct eng_entry_info *ei)
{
	char buf[64 * 3 + 8];

	rep_set_int(row, LS_OWNER, ei->owner);
	nodes_text(ei, buf, sizeof(buf));
	rep_set_str(row, LS_HOLDERS, buf);
}

struct ls_walk {
	struct eng *e;
	struct rep *rep;
};

static int ls_row(void *ctx, const struct eng_entry_info *ei)
{
	struct ls_walk *w = ctx;
	struct rep *rep = w->rep;
	struct rep_obj *row = rep_row(rep, NULL, 0);
	struct eng_ckpt_info ci;
	char buf[PATH_MAX + 2];

	if (!row)
		return 1;
	/* With a leading '/', as the user names it. */
	snprintf(buf, sizeof(buf), "/%s", ei->path ? ei->path : "");
	rep_set_str(row, LS_PATH, buf);
	rep_set_str(row, LS_TYPE, type_name(ei->mode));
	rep_set_u64(row, LS_INO, ei->ino);
	snprintf(buf, sizeof(buf), "%04o", (unsigned)(ei->mode & 07777));
	rep_set_str(row, LS_MODE, buf);
	rep_set_u64(row, LS_SIZE, ei->size);
	rep_set_int(row, LS_MTIME, ei->mtime.tv_sec);
	rep_set_int(row, LS_MTIME_NSEC, ei->mtime.tv_nsec);
	if (S_ISREG(ei->mode)) {
		rep_set_u64(row, LS_STATE, ei->state);
		rep_set_u64(row, LS_CRC, ei->crc);
		rep_set_str(row, LS_TIER, ei->tier);
		rep_set_u64(row, LS_CHUNKS, ei->chunks);
		rep_set_u64(row, LS_RESIDENT, ei->chunks_resident);
		rep_set_bool(row, LS_IN_PERSIST, ei->in_persist);
		if (ei->owner >= 0)
			ls_set_nodes(row, ei);
	} else if (S_ISDIR(ei->mode) && eng_ino_state(w->e, ei->ino, &ci) == 0) {
		/* The files below it (none shown if it went meanwhile). */
		ci.name = ei->path;
		rfs_ctl_ckpt_fill(rep_obj(row, LS_TREE), &ci);
	}
	return rep_err(rep) ? 1 : 0;
}

int rfs_ctl_cmd_ls(struct ctl_req *r, struct rep_out *o)
{
	char rel[RFS_CTL_MAX_LINE + 1];
	const char *in_mount;
	struct ls_walk w = { r->e, NULL };
	struct rep *rep;
	int rc;

	rc = rfs_ctl_path_ready(r, o, "ls", rel, sizeof(rel));
	if (rc != CTL_EXIT_OK)
		return rc;
	rep = rep_new(&ls_root);
	if (!rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	w.rep = rep;
	rc = eng_list_path(r->e, rel, ls_row, &w);
	if (rfs_ctl_list_failed(o, rep, rc, "ls", rel)) {
		/* "ls /mnt/ckpt/step_1" for "ls /step_1": say so. */
		if (rc == -ENOENT && (in_mount = rfs_ctl_in_mount(r))) {
			rep_out_begin(o, 'e');
			rep_out_str(o, "paths are relative to the mount root: "
				       "try 'ls /");
			if (rfs_ctl_norm_path(in_mount, rel, sizeof(rel)) == 0)
				rep_out_text(o, rel);
			rep_out_str(o, "'");
			rep_out_end(o);
		}
		return CTL_EXIT_FAIL;
	}
	if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, ls_text, 1, 0);
	rep_free(rep);
	return CTL_EXIT_OK;
}

/* --- placement ----------------------------------------------------------- */

enum { PL_INDEX, PL_SIZE, PL_CRC, PL_HERE, PL_OWNER, PL_NODES, PL_SEAL,
       PL_STRIPE, PL_SLOT, PL_DATA, PL_PARITY, PL_N };

static const struct rep_field pl_fields[PL_N] = {
	[PL_INDEX] = REP_FIELD("piece", REP_COUNT),
	[PL_SIZE] = REP_FIELD("size", REP_BYTES),
	/* "1a2b3c4d", or null until the file is sealed */
	[PL_CRC] = REP_FIELD("crc32c", REP_STRING),
	[PL_HERE] = REP_FIELD("here", REP_STRING),
	/* In a group: the owner, and "1+2": the nodes with the bytes. */
	[PL_OWNER] = REP_FIELD("owner", REP_INT),
	[PL_NODES] = REP_FIELD("nodes", REP_STRING),
	[PL_SEAL] = REP_FIELD("seal", REP_COUNT),
	/* xor, rs: its stripe, data slot, and the nodes of the stripe's
	   data slots ("0,1") and parity rows ("2"). */
	[PL_STRIPE] = REP_FIELD("stripe", REP_COUNT),
	[PL_SLOT] = REP_FIELD("slot", REP_COUNT),
	[PL_DATA] = REP_FIELD("stripe_data_nodes", REP_STRING),
	[PL_PARITY] = REP_FIELD("stripe_parity_nodes", REP_STRING),
};

static const struct rep_field pl_root = {
	.key = "pieces",
	.type = REP_TABLE,
	.fields = pl_fields,
	.n = PL_N,
};

static const struct rep_col pl_cols[] = {
	{ "", "PIECE", 5, 0 },	     { "  ", "SIZE", 9, 0 },
	{ "  ", "CRC32C", -8, 0 },   { "  ", "HERE", -13, 0 },
	{ "  ", "NODES", 0, 0 },
};

static const struct rep_row_text pl_rows[] = {
	{ "stripe_parity_nodes",
	  (const char *const[]){ "{piece}", "{size:n}", "{crc32c}", "{here}",
				 "{nodes}  stripe {stripe} slot {slot}: data "
				 "{stripe_data_nodes}, parity "
				 "{stripe_parity_nodes}" } },
	{ "nodes", (const char *const[]){ "{piece}", "{size:n}", "{crc32c}",
					  "{here}", "{nodes}" } },
	{ NULL, (const char *const[]){ "{piece}", "{size:n}", "{crc32c}",
				       "{here}", "-" } },
};

static const struct rep_table_text pl_table = { NULL, pl_cols, 5, pl_rows,
						3 };

static const struct rep_text pl_text[] = {
	TABLE(NULL, &pl_table),
};

/* "0,2,5": the nodes of @mask. */
static void node_list(uint64_t mask, char *buf, size_t size)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int n = 0; n < 64 && len + 4 < size; n++)
		if (mask & (1ULL << n))
			len += (size_t)snprintf(buf + len, size - len, "%s%d",
						len ? "," : "", n);
}

static int pl_row(void *ctx, const struct eng_piece_info *pi)
{
	struct rep *rep = ctx;
	struct rep_obj *row = rep_row(rep, NULL, 0);
	struct eng_entry_info ei = { .owner = pi->owner,
				     .holders = pi->holders };
	char crc[16];

	if (!row)
		return 1;
	rep_set_u64(row, PL_INDEX, pi->index);
	rep_set_u64(row, PL_SIZE, pi->len);
	if (pi->crc_known) {
		snprintf(crc, sizeof(crc), "%08x", pi->crc);
		rep_set_str(row, PL_CRC, crc);
	} else {
		rep_set_str(row, PL_CRC, "-");
	}
	rep_set_str(row, PL_HERE, pi->here);
	if (pi->owner >= 0) {
		char nodes[64 * 3 + 8];

		rep_set_int(row, PL_OWNER, pi->owner);
		nodes_text(&ei, nodes, sizeof(nodes));
		rep_set_str(row, PL_NODES, nodes);
		rep_set_u64(row, PL_SEAL, pi->seal);
	}
	if (pi->striped) {
		char nodes[64 * 3 + 8];

		rep_set_u64(row, PL_STRIPE, pi->stripe);
		rep_set_u64(row, PL_SLOT, (uint64_t)pi->slot);
		node_list(pi->data_nodes, nodes, sizeof(nodes));
		rep_set_str(row, PL_DATA, nodes);
		node_list(pi->parity_nodes, nodes, sizeof(nodes));
		rep_set_str(row, PL_PARITY, nodes);
	}
	return rep_err(rep) ? 1 : 0;
}

/* placement PATH: where each piece of a file is, here and in the group. */
int rfs_ctl_cmd_placement(struct ctl_req *r, struct rep_out *o)
{
	char rel[RFS_CTL_MAX_LINE + 1];
	struct rep *rep;
	int rc;

	if (!r->path) {
		rep_out_line(o, 'e', "placement: which file? usage: placement "
				     "PATH [--json]");
		return CTL_EXIT_USAGE;
	}
	if (rfs_ctl_norm_path(r->path, rel, sizeof(rel)) < 0) {
		rep_out_line(o, 'e', "placement: path too long");
		return CTL_EXIT_USAGE;
	}
	rep = rep_new(&pl_root);
	if (!rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	rc = eng_list_pieces(r->e, rel, pl_row, rep);
	if (rfs_ctl_list_failed(o, rep, rc, "placement", rel))
		return CTL_EXIT_FAIL;
	if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, pl_text, 1, 0);
	rep_free(rep);
	return CTL_EXIT_OK;
}
