/*
 * ctl_i.h - the control socket's server (ctl.c) and its commands
 * (ctl_*.c) to each other.  Private to fs/ctl*.c: the rest of fs/ sees
 * only ctl.h.
 *
 * ctl.c owns the socket, the threads, the request line and its framing,
 * and the table of commands; each command family has a file of its own
 * that ctl.c's table names: ctl_status.c (status, metrics, version),
 * ctl_group.c (group), ctl_list.c (ls, placement), ctl_verify.c (verify),
 * ctl_flush.c (flush), ctl_protect.c (protect, rebuild), ctl_ckpt.c
 * (checkpoints, wait).
 *
 * Each command fills a report (report.h) once from the engine's reporting
 * calls and renders it in the format asked for; the schemas and text
 * layouts in its file are the whole of what a command says.  Answers are
 * built in memory and sent after the engine calls return: engine callbacks
 * run under engine locks, and a client that stops reading must never keep
 * one held.  Only the --wait of flush, protect and rebuild streams,
 * between calls (rfs_ctl_send()).
 */
#ifndef RFT_CTL_I_H
#define RFT_CTL_I_H

#include <stdbool.h>
#include <stddef.h>

#include "ctl.h"
#include "report.h"

/* --wait, and waits for a group's log: the poll period */
#define CTL_POLL_MS 100
#define CTL_BEAT_MS 1000 /* --wait: a record at least this often */

/* Exit codes carried by the final "x" line; docs/protocol.md. */
enum {
	CTL_GONE = -1, /* the client went away: send nothing more */
	CTL_EXIT_OK = 0,
	CTL_EXIT_FAIL = 1,  /* the command ran and failed */
	CTL_EXIT_USAGE = 2, /* unknown command, bad arguments, bad request */
	CTL_EXIT_TIMEOUT = 3, /* wait: not there by --timeout */
};

/* --- requests ----------------------------------------------------------- */

#define CMD_JSON (1u << 0) /* takes --json */
#define CMD_WAIT (1u << 1) /* takes --wait */
#define CMD_REPAIR (1u << 3) /* takes --repair */
#define CMD_PATH (1u << 2) /* takes one optional PATH */
#define CMD_WORDS (1u << 4) /* takes words after it (a subcommand) */
#define CMD_STATE (1u << 5) /* takes --sealed, --protected or --persisted,
			       and --timeout SECONDS */
#define CMD_MTBF (1u << 6) /* takes --mtbf HOURS */
#define CTL_MAX_WORDS 16

struct ctl_req;

/* A command: an entry of ctl.c's table. */
struct ctl_cmd {
	const char *name;
	unsigned opts;	   /* CMD_* */
	const char *usage; /* its arguments */
	const char *help;
	/* Renders into @o; returns an exit code or CTL_GONE. */
	int (*fn)(struct ctl_req *r, struct rep_out *o);
};

/*
 * One request, while a worker serves it.  @e, @g, @fuse and @sock are the
 * server's, fixed before rfs_ctl_start(): what a command may report on.
 */
struct ctl_req {
	struct rfs_ctl *c; /* the server: rfs_ctl_nap() only */
	struct eng *e;
	struct grp *g;	/* NULL: not in a group */
	struct rfs_fuse_info *fuse; /* NULL: not told */
	const char *sock; /* the control socket's path */
	int fd;
	bool eof; /* the client shut its side: stop polling it for input */
	const struct ctl_cmd *cmd;
	bool json, wait, repair;
	int want;	   /* CMD_STATE: the enum eng_state asked for, -1 */
	unsigned timeout_ms; /* CMD_STATE: --timeout; 0: none */
	double mtbf_h;	   /* CMD_MTBF: --mtbf HOURS; 0: not given */
	const char *path; /* ls: NULL for the root */
	const char *words[CTL_MAX_WORDS]; /* CMD_WORDS: the words after it */
	int nwords;
};

/* Send what @o holds now and empty it (--wait streams this way). */
int rfs_ctl_send(struct ctl_req *r, struct rep_out *o);

/*
 * Sleep up to @ms watching the client and rfs_ctl_free().  Returns 0, or
 * -ESHUTDOWN when the server stops, -EPIPE when the client is gone.
 */
int rfs_ctl_nap(struct ctl_req *r, int ms);

/*
 * @in (absolute or relative to the mount root) as the engine wants it:
 * no leading or doubled '/', "." dropped, ".." applied (never above the
 * root), "" for the root.  @out holds @size bytes.
 */
int rfs_ctl_norm_path(const char *in, char *out, size_t size);

/*
 * @r's PATH when it is under the daemon's mount point, as a job script
 * has it: the rest after the mount point ("" for the mount point itself);
 * else NULL.
 */
const char *rfs_ctl_in_mount(const struct ctl_req *r);

/*
 * The PATH argument of @cmd ("" for none) normalised into @rel, once this
 * node caught up with the group's namespace.  CTL_EXIT_OK, or the exit
 * code with the reason said.
 */
int rfs_ctl_path_ready(struct ctl_req *r, struct rep_out *o, const char *cmd,
		       char *rel, size_t size);

/*
 * After eng_list_*() filled @rep: 0 when it worked, else an exit code (the
 * report freed, the error said as "CMD: /REL: reason").
 */
int rfs_ctl_list_failed(struct rep_out *o, struct rep *rep, int rc,
			const char *cmd, const char *rel);

/* --- reports ------------------------------------------------------------ */

/* A line of text (struct rep_text): when, label, template. */
#define TXT(when, label, tmpl) { (when), (label), (tmpl), NULL }
/* A table in the text (struct rep_text): when, its layout. */
#define TABLE(when, t) { (when), NULL, NULL, (t) }

#define NSTATES (ENG_STATE_PERSISTED + 1)

/* strerror() of @err or -@err. */
const char *rfs_ctl_err_name(int err);

/* The name of enum eng_state @s, "unknown" for none (REP_ENUM name_of). */
const char *rfs_ctl_state_of(unsigned s);
/* The same of a checkpoint's: "incomplete" for a lost file's. */
const char *rfs_ctl_ckpt_state_of(unsigned s);

/* A checkpoint, in "status", "checkpoints" and "wait" (ctl_status.c). */
enum { CK_NAME, CK_SEQ, CK_STATE, CK_FILES, CK_BYTES, CK_RESIDENT, CK_FLAGS,
       CK_LOST, CK_WRITING, CK_SEALED, CK_PROTECTED, CK_PERSISTED, CK_N };
extern const struct rep_field rfs_ctl_ckpt_fields[CK_N];
void rfs_ctl_ckpt_fill(struct rep_obj *row, const struct eng_ckpt_info *ci);

/* --- commands (ctl.c's table names them) -------------------------------- */

/* Each renders into @o; returns an exit code or CTL_GONE. */
/* ctl_status.c */
int rfs_ctl_cmd_status(struct ctl_req *r, struct rep_out *o);
int rfs_ctl_cmd_metrics(struct ctl_req *r, struct rep_out *o);
int rfs_ctl_cmd_version(struct ctl_req *r, struct rep_out *o);
/* ctl_group.c */
int rfs_ctl_cmd_group(struct ctl_req *r, struct rep_out *o);
/* ctl_list.c */
int rfs_ctl_cmd_ls(struct ctl_req *r, struct rep_out *o);
int rfs_ctl_cmd_placement(struct ctl_req *r, struct rep_out *o);
/* ctl_verify.c */
int rfs_ctl_cmd_verify(struct ctl_req *r, struct rep_out *o);
/* ctl_flush.c */
int rfs_ctl_cmd_flush(struct ctl_req *r, struct rep_out *o);
/* ctl_protect.c */
int rfs_ctl_cmd_protect(struct ctl_req *r, struct rep_out *o);
int rfs_ctl_cmd_rebuild(struct ctl_req *r, struct rep_out *o);
/* ctl_ckpt.c */
int rfs_ctl_cmd_checkpoints(struct ctl_req *r, struct rep_out *o);
int rfs_ctl_cmd_wait(struct ctl_req *r, struct rep_out *o);
int rfs_ctl_cmd_advise(struct ctl_req *r, struct rep_out *o);

/* --- the group, in "group" and in "status" (ctl_group.c) ---------------- */

/* Fields of the group object, and of a row of its member table. */
#define CTL_GROUP_NFIELDS 69
#define CTL_MEMBER_NFIELDS 17
extern const struct rep_field rfs_ctl_group_fields[CTL_GROUP_NFIELDS];
extern const struct rep_field rfs_ctl_member_fields[CTL_MEMBER_NFIELDS];

/*
 * Fill group object @gobj (rfs_ctl_group_fields) and member table @tbl
 * (rows of rfs_ctl_member_fields) of @top from the group; not in a group,
 * only "enabled": false.
 */
void rfs_ctl_fill_group(const struct ctl_req *r, struct rep *rep,
			struct rep_obj *gobj, struct rep_obj *top,
			unsigned tbl);

#endif /* RFT_CTL_I_H */
