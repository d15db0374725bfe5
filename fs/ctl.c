/*
 * ctl.c - the control socket: how reftfs-admin sees into reftfsd.
 *
 * One request line per connection, answered by tagged lines, then closed
 * (docs/protocol.md, "Control socket").  The daemon renders every answer,
 * human text, JSON or Prometheus, so the client needs no parser and an old
 * client keeps working when fields are added.
 *
 * This file is the server: the socket, who may use it, the threads, the
 * request line, the framing of answers and the table of commands.  The
 * commands are in a file per family (ctl_i.h says which, and what they
 * may count on).
 *
 * Threads: the acceptor ("rft-ctl", a poll loop of its own: it waits on
 * sockets and times, not on a queue) and the workers, an rft_wq
 * ("rft-ctl-cmd/0".."/15", one FIFO list of at most CTL_MAX_QUEUED
 * requests).  The acceptor takes back from the queue what waited
 * CTL_BUSY_MS for a worker and answers it "busy".
 *
 * Locks: c->lock (the fds being served, the stop) and the queue's are
 * leaves.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_i.h"
#include "report.h"
#include "rft_wq.h"

#define CTL_IO_MS 10000	  /* the request line; each blocked send */
#define CTL_CATCH_UP_MS 30000 /* ls waits this long for a group's log */
#define CTL_BACKOFF_MS 100 /* accept() failing for lack of resources */
#define CTL_BUSY_MS 2000  /* a request waits this long for a worker */
#define CTL_GRACE_MS 500  /* rfs_ctl_free: clients finish their lines */
#define CTL_MAX_ARGS 16	  /* words in a request, command included */
#define CTL_MAX_PENDING 64 /* connections still sending their line */
#define CTL_MAX_QUEUED 64  /* requests waiting for a worker */
#define CTL_IDLE_MS 100	  /* pending set full: drop the oldest if silent
			     this long, to take a new connection */

/*
 * One connection, from accept() until it is answered.  The acceptor owns
 * it while the request line comes in; then it waits in the queue (the
 * acceptor may take it back), and a worker owns it while it serves the
 * request.
 */
struct ctl_conn {
	struct rft_wq_item w;	/* in c->wq; first */
	struct rfs_ctl *c;
	int fd;
	struct ucred cred;
	/*
	 * mono ms: accepted (the queue keeps when it was queued, w).  Either
	 * may be later than the "now" of the acceptor's pass that set it:
	 * compare as since + T <= now.
	 */
	uint64_t since;
	bool eof;	/* the client shut its side to end the line */
	size_t len;	/* bytes of line read so far */
	char line[RFS_CTL_MAX_LINE + 1];
};

struct rfs_ctl {
	struct eng *e;
	struct grp *g;	/* NULL: not in a group */
	struct rfs_fuse_info *fuse; /* NULL: not told */
	char *path;
	int lfd;
	int wakefd;	/* eventfd, readable once rfs_ctl_free() starts */
	dev_t sock_dev; /* the node we bound: unlink only that one */
	ino_t sock_ino;
	bool acceptor_started;
	bool workers_started;
	pthread_t acceptor;
	/* Connections whose line is still coming, oldest first: acceptor. */
	struct ctl_conn *pending[CTL_MAX_PENDING];
	unsigned npending;
	/* The workers: complete requests, oldest first. */
	struct rft_wq *wq;
	pthread_mutex_t lock;
	pthread_cond_t done; /* a worker finished a request */
	bool stopping;	     /* protected by lock */
	/* The clients being served, -1 for a free place (no more requests
	   are served at once than there are workers); protected by lock. */
	int serving[RFS_CTL_MAX_CLIENTS];
};

static const char *state_name(enum eng_state s)
{
	const char *n = eng_state_name(s);

	return n ? n : "unknown";
}

const char *rfs_ctl_err_name(int err)
{
	return strerror(err < 0 ? -err : err);
}

const char *rfs_ctl_state_of(unsigned s)
{
	return state_name((enum eng_state)s);
}

/* --- requests ----------------------------------------------------------- */

static int send_all(int fd, const char *p, size_t n)
{
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int rfs_ctl_send(struct ctl_req *r, struct rep_out *o)
{
	int rc;

	if (o->err)
		return o->err;
	rc = send_all(r->fd, o->buf, o->len);
	o->len = 0;
	return rc;
}

int rfs_ctl_nap(struct ctl_req *r, int ms)
{
	struct pollfd pfd[2] = {
		{ .fd = r->c->wakefd, .events = POLLIN },
		{ .fd = r->eof ? -1 : r->fd, .events = POLLIN },
	};
	char junk[256];
	ssize_t n;

	if (poll(pfd, 2, ms) < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[0].revents)
		return -ESHUTDOWN;
	if (pfd[1].revents & (POLLHUP | POLLERR | POLLNVAL))
		return -EPIPE;
	if (!(pfd[1].revents & POLLIN))
		return 0;
	/*
	 * EOF may be a half-close by a client still reading (socat does
	 * that): stop watching; a closed client shows on the next send.
	 */
	n = recv(r->fd, junk, sizeof(junk), MSG_DONTWAIT);
	if (n == 0)
		r->eof = true;
	else if (n < 0 && errno != EAGAIN && errno != EINTR)
		return -EPIPE;
	return 0;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * Split @line in place into at most @max words.  Blanks separate words; a
 * word in double quotes may hold blanks, and in it \\ \" \n \t and \xHH
 * (not \x00) stand for one byte.  Control characters are refused.
 * Returns the word count, or -EINVAL / -E2BIG with @why set.
 */
static int split_words(char *line, char **argv, int max, const char **why)
{
	char *p = line, *w;
	int argc = 0, hi, lo;
	unsigned char ch;

	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			return argc;
		if (argc == max) {
			*why = "too many words";
			return -E2BIG;
		}
		argv[argc++] = w = p;
		if (*p != '"') {
			for (; *p && *p != ' ' && *p != '\t'; p++) {
				ch = (unsigned char)*p;
				if (ch < 0x20 || ch == 0x7f)
					goto ctrl;
			}
			if (*p)
				*p++ = '\0';
			continue;
		}
		for (p++; *p != '"'; p++) {
			ch = (unsigned char)*p;
			if (!ch) {
				*why = "unterminated quote";
				return -EINVAL;
			}
			if (ch < 0x20 || ch == 0x7f)
				goto ctrl;
			if (ch == '\\') {
				switch (*++p) {
				case '\\':
				case '"':
					ch = (unsigned char)*p;
					break;
				case 'n':
					ch = '\n';
					break;
				case 't':
					ch = '\t';
					break;
				case 'x':
					hi = hexval(p[1]);
					lo = hi < 0 ? -1 : hexval(p[2]);
					if (lo < 0 || (!hi && !lo))
						goto esc;
					ch = (unsigned char)(hi << 4 | lo);
					p += 2;
					break;
				default:
					goto esc;
				}
			}
			*w++ = (char)ch;
		}
		p++; /* the closing quote; w is behind it */
		if (*p && *p != ' ' && *p != '\t') {
			*why = "text right after a closing quote";
			return -EINVAL;
		}
		*w = '\0';
	}
ctrl:
	*why = "control character (quote it as \\n, \\t or \\xHH)";
	return -EINVAL;
esc:
	*why = "bad escape in quotes (use \\\\ \\\" \\n \\t \\xHH)";
	return -EINVAL;
}

int rfs_ctl_norm_path(const char *in, char *out, size_t size)
{
	const char *p = in, *s;
	size_t len = 0, n;

	while (*p) {
		while (*p == '/')
			p++;
		for (s = p; *p && *p != '/'; p++)
			;
		n = (size_t)(p - s);
		if (!n || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			while (len && out[len - 1] != '/')
				len--;
			if (len)
				len--;
			continue;
		}
		if (len + 1 + n + 1 > size)
			return -ENAMETOOLONG;
		if (len)
			out[len++] = '/';
		memcpy(out + len, s, n);
		len += n;
	}
	out[len] = '\0';
	return 0;
}

const char *rfs_ctl_in_mount(const struct ctl_req *r)
{
	const char *mnt = eng_get_config(r->e)->mountpoint;
	size_t n = mnt ? strlen(mnt) : 0;

	if (n > 1 && r->path && !strncmp(r->path, mnt, n) &&
	    (r->path[n] == '/' || !r->path[n]))
		return r->path + n;
	return NULL;
}

int rfs_ctl_list_failed(struct rep_out *o, struct rep *rep, int rc,
			const char *cmd, const char *rel)
{
	if (rep_err(rep)) {
		o->err = rep_err(rep);
		rep_free(rep);
		return CTL_EXIT_FAIL;
	}
	if (rc >= 0)
		return 0;
	rep_free(rep);
	rep_out_begin(o, 'e');
	rep_out_printf(o, "%s: /", cmd);
	rep_out_text(o, rel);
	rep_out_printf(o, ": %s", rfs_ctl_err_name(rc));
	rep_out_end(o);
	return CTL_EXIT_FAIL;
}

/*
 * A group's node shows its namespace once it is the group's: wait (at most
 * CTL_CATCH_UP_MS) until it caught up with the log.  CTL_EXIT_OK, or the
 * exit code with the reason said.
 */
static int wait_caught_up(struct ctl_req *r, struct rep_out *o,
			  const char *cmd)
{
	int rc;

	for (int i = 0; !eng_group_caught_up(r->e); i++) {
		if (i * CTL_POLL_MS >= CTL_CATCH_UP_MS) {
			rep_out_line(o, 'e', "%s: this node has not caught up "
					     "with the group's namespace log "
					     "(see reftfs-admin group)", cmd);
			return CTL_EXIT_FAIL;
		}
		rc = rfs_ctl_nap(r, CTL_POLL_MS);
		if (rc == -ESHUTDOWN) {
			rep_out_line(o, 'e', "%s: reftfsd is stopping", cmd);
			return CTL_EXIT_FAIL;
		}
		if (rc < 0)
			return CTL_GONE;
	}
	return CTL_EXIT_OK;
}

int rfs_ctl_path_ready(struct ctl_req *r, struct rep_out *o, const char *cmd,
		       char *rel, size_t size)
{
	if (rfs_ctl_norm_path(r->path ? r->path : "", rel, size) < 0) {
		rep_out_line(o, 'e', "%s: path too long", cmd);
		return CTL_EXIT_USAGE;
	}
	return wait_caught_up(r, o, cmd);
}

/* --- help, dispatch ---------------------------------------------------- */

static int cmd_help(struct ctl_req *r, struct rep_out *o);

static const struct ctl_cmd ctl_cmds[] = {
	{ "status", CMD_JSON, "[--json]",
	  "memory, contents, persist tier, counters, checkpoints",
	  rfs_ctl_cmd_status },
	{ "ls", CMD_JSON | CMD_PATH, "[PATH] [--json]",
	  "state, size, tier and checksum of the files under PATH",
	  rfs_ctl_cmd_ls },
	{ "flush", CMD_JSON | CMD_WAIT, "[--wait] [--json]",
	  "write back everything sealed now; --wait shows progress",
	  rfs_ctl_cmd_flush },
	{ "group", CMD_JSON | CMD_WORDS, "[--json] | force-remove NODE...",
	  "the sharding group: members, their state, links, counters; "
	  "force-remove: end lost nodes' votes after a lost majority",
	  rfs_ctl_cmd_group },
	{ "placement", CMD_JSON | CMD_PATH, "PATH [--json]",
	  "where each piece of a file is: here, and the nodes that hold it",
	  rfs_ctl_cmd_placement },
	{ "verify", CMD_JSON | CMD_PATH | CMD_REPAIR,
	  "[PATH] [--repair] [--json]",
	  "recompute the checksums of the files under PATH, here and on "
	  "the nodes with copies; --repair puts bad pieces right",
	  rfs_ctl_cmd_verify },
	{ "protect", CMD_JSON | CMD_WAIT, "[--wait] [--json]",
	  "copies of this node's files on peers; --wait until all are",
	  rfs_ctl_cmd_protect },
	{ "rebuild", CMD_JSON | CMD_WAIT, "[--wait] [--json]",
	  "bringing back this node's files after a start with empty "
	  "memory; --wait until done",
	  rfs_ctl_cmd_rebuild },
	{ "checkpoints", CMD_JSON, "[--json]",
	  "each checkpoint's files by state; the newest wholly protected "
	  "and wholly persisted",
	  rfs_ctl_cmd_checkpoints },
	{ "wait", CMD_JSON | CMD_PATH | CMD_STATE,
	  "PATH --sealed|--protected|--persisted [--timeout SECONDS] "
	  "[--json]",
	  "until every file under PATH is so: exit 0, 1 once one is lost, "
	  "3 at the timeout",
	  rfs_ctl_cmd_wait },
	{ "advise", CMD_JSON | CMD_MTBF, "[--mtbf HOURS] [--json]",
	  "from this node's recent checkpoints: the interval that loses "
	  "the least time, --persist-every, the odds of a loss",
	  rfs_ctl_cmd_advise },
	{ "metrics", CMD_JSON, "[--json]", "Prometheus text exposition",
	  rfs_ctl_cmd_metrics },
	{ "version", CMD_JSON, "[--json]", "daemon version",
	  rfs_ctl_cmd_version },
	{ "help", 0, "", "this list", cmd_help },
};

#define NCMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

static int cmd_help(struct ctl_req *r, struct rep_out *o)
{
	size_t i;
	char syn[64];

	rep_out_line(o, 'o', "commands:");
	for (i = 0; i < NCMDS; i++) {
		snprintf(syn, sizeof(syn), "%s %s", ctl_cmds[i].name,
			 ctl_cmds[i].usage);
		rep_out_line(o, 'o', "  %-26s %s", syn, ctl_cmds[i].help);
	}
	return CTL_EXIT_OK;
}

static int usage_error(struct rep_out *o, const struct ctl_cmd *cmd,
		       const char *what, const char *arg)
{
	rep_out_begin(o, 'e');
	rep_out_printf(o, "%s: %s '", cmd->name, what);
	rep_out_text(o, arg);
	rep_out_str(o, "'");
	rep_out_end(o);
	rep_out_line(o, 'e', "usage: %s%s%s", cmd->name, *cmd->usage ? " " : "",
		cmd->usage);
	return CTL_EXIT_USAGE;
}

/* "30", "2.5": seconds, more than 0 and at most a day, into *@ms. */
static int parse_seconds(const char *a, unsigned *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(a, &end);
	if (errno || end == a || *end || !(v > 0) || v > 86400)
		return -1;
	*ms = (unsigned)(v * 1000 + 0.5);
	if (!*ms)
		*ms = 1;
	return 0;
}

/* "24", "0.5": hours, more than 0 and at most 10^6, into *@h. */
static int parse_hours(const char *a, double *h)
{
	char *end;

	errno = 0;
	*h = strtod(a, &end);
	return errno || end == a || *end || !(*h > 0) || *h > 1e6 ? -1 : 0;
}

static int parse_args(struct ctl_req *r, int argc, char **argv,
		      struct rep_out *o)
{
	const struct ctl_cmd *cmd = r->cmd;
	bool opts_done = false;
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!opts_done && a[0] == '-' && a[1]) {
			if (!strcmp(a, "--"))
				opts_done = true;
			else if (!strcmp(a, "--json") && (cmd->opts & CMD_JSON))
				r->json = true;
			else if (!strcmp(a, "--wait") && (cmd->opts & CMD_WAIT))
				r->wait = true;
			else if (!strcmp(a, "--repair") &&
				 (cmd->opts & CMD_REPAIR))
				r->repair = true;
			else if ((cmd->opts & CMD_STATE) &&
				 !strcmp(a, "--sealed"))
				r->want = ENG_STATE_SEALED;
			else if ((cmd->opts & CMD_STATE) &&
				 !strcmp(a, "--protected"))
				r->want = ENG_STATE_PROTECTED;
			else if ((cmd->opts & CMD_STATE) &&
				 !strcmp(a, "--persisted"))
				r->want = ENG_STATE_PERSISTED;
			else if ((cmd->opts & CMD_STATE) &&
				 !strcmp(a, "--timeout")) {
				if (++i == argc ||
				    parse_seconds(argv[i], &r->timeout_ms) < 0)
					return usage_error(
						o, cmd, "bad --timeout",
						i < argc ? argv[i] : "");
			} else if ((cmd->opts & CMD_MTBF) &&
				   !strcmp(a, "--mtbf")) {
				if (++i == argc ||
				    parse_hours(argv[i], &r->mtbf_h) < 0)
					return usage_error(
						o, cmd, "bad --mtbf",
						i < argc ? argv[i] : "");
			} else
				return usage_error(o, cmd, "unknown option", a);
		} else if ((cmd->opts & CMD_PATH) && !r->path) {
			r->path = a;
		} else if ((cmd->opts & CMD_WORDS) &&
			   r->nwords < CTL_MAX_WORDS) {
			r->words[r->nwords++] = a;
		} else {
			return usage_error(o, cmd, "unexpected argument", a);
		}
	}
	return CTL_EXIT_OK;
}

/* Parse and run one request line; returns an exit code or CTL_GONE. */
static int ctl_run(struct ctl_req *r, char *line, struct rep_out *o)
{
	char *argv[CTL_MAX_ARGS];
	const char *why = "";
	size_t i;
	int argc, code;

	argc = split_words(line, argv, CTL_MAX_ARGS, &why);
	if (argc < 0) {
		rep_out_line(o, 'e', "malformed request: %s", why);
		return CTL_EXIT_USAGE;
	}
	if (!argc) {
		rep_out_line(o, 'e', "empty request (try 'help')");
		return CTL_EXIT_USAGE;
	}
	for (i = 0; i < NCMDS; i++)
		if (!strcmp(argv[0], ctl_cmds[i].name))
			break;
	if (i == NCMDS) {
		rep_out_begin(o, 'e');
		rep_out_str(o, "unknown command '");
		rep_out_text(o, argv[0]);
		rep_out_str(o, "' (try 'help')");
		rep_out_end(o);
		return CTL_EXIT_USAGE;
	}
	r->cmd = &ctl_cmds[i];
	r->want = -1;
	code = parse_args(r, argc, argv, o);
	if (code != CTL_EXIT_OK)
		return code;
	return r->cmd->fn(r, o);
}

static void ctl_serve(struct rfs_ctl *c, struct ctl_conn *conn)
{
	struct timeval tv = { .tv_sec = CTL_IO_MS / 1000 };
	struct ctl_req r = { .c = c, .e = c->e, .g = c->g, .fuse = c->fuse,
			     .sock = c->path, .fd = conn->fd,
			     .eof = conn->eof };
	struct rep_out o = { 0 };
	int fd = conn->fd, flags, rc, code;
	char x[32];

	/*
	 * Accepted non-blocking for the acceptor; a worker may block, but a
	 * client that stops reading holds a send CTL_IO_MS at most.
	 */
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		rft_warn("control socket: O_NONBLOCK: %s", strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		rft_warn("control socket: SO_SNDTIMEO: %s", strerror(errno));
	rft_dbg("control socket: uid %u pid %d: %.200s",
		(unsigned)conn->cred.uid, (int)conn->cred.pid, conn->line);
	code = ctl_run(&r, conn->line, &o);
	if (code == CTL_GONE)
		goto out;
	if (o.err) {
		/* Drop the partial answer; say why in a line we can afford. */
		static const char big[] = "e answer larger than 64 MiB; "
					  "ask for less\n";
		static const char nomem[] = "e reftfsd is out of memory\n";

		o.len = 0;
		if (o.err == -EFBIG)
			rc = send_all(fd, big, sizeof(big) - 1);
		else
			rc = send_all(fd, nomem, sizeof(nomem) - 1);
		if (rc < 0)
			goto out;
		code = CTL_EXIT_FAIL;
	} else if (rfs_ctl_send(&r, &o) < 0) {
		goto out;
	}
	snprintf(x, sizeof(x), "x %d\n", code);
	send_all(fd, x, strlen(x));
out:
	free(o.buf);
}

/* --- threads ------------------------------------------------------------ */

/*
 * Unread input at close() makes the kernel fail the client's reads with
 * ECONNRESET: drain what is queued (a request that was too long, words
 * after the line) so that the client sees our answer and a clean EOF.
 */
static void ctl_drain(int fd)
{
	char junk[4096];
	int i;

	for (i = 0; i < 256; i++)
		if (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) <= 0)
			break;
}

/*
 * Answer @conn with @msg (whole lines, "x" included; NULL: nothing) and
 * close it.  The acceptor's way: a short answer fits in the empty socket
 * buffer of a connection that has not been answered yet, so this never
 * blocks.
 */
static void ctl_close(struct ctl_conn *conn, const char *msg)
{
	if (msg && send(conn->fd, msg, strlen(msg),
			MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		rft_dbg("control socket: answer: %s", strerror(errno));
	ctl_drain(conn->fd);
	close(conn->fd);
	free(conn);
}

static const char ctl_busy[] = "e reftfsd is serving too many control "
			       "clients; try again\nx 1\n";
static const char ctl_stopping[] = "e reftfsd is stopping; try again when it "
				   "runs\nx 1\n";

/*
 * A worker's item: serve @w's request, or say reftfsd is stopping (a stop
 * began while it waited: no request is served after that).
 */
static void ctl_work(struct rft_wq_item *w, bool cancel)
{
	struct ctl_conn *conn = (struct ctl_conn *)w;
	struct rfs_ctl *c = conn->c;
	unsigned slot = 0;
	bool stopping;

	pthread_mutex_lock(&c->lock);
	stopping = cancel || c->stopping;
	while (!stopping && c->serving[slot] >= 0)
		slot++;
	if (!stopping)
		c->serving[slot] = conn->fd;
	pthread_mutex_unlock(&c->lock);
	if (stopping) {
		ctl_close(conn, ctl_stopping);
		return;
	}

	ctl_serve(c, conn);
	ctl_drain(conn->fd);

	/* Closed under the lock: ctl_stop() may shut the fd. */
	pthread_mutex_lock(&c->lock);
	close(conn->fd);
	c->serving[slot] = -1;
	pthread_cond_broadcast(&c->done);
	pthread_mutex_unlock(&c->lock);
	free(conn);
}

/*
 * Queue a complete request for the workers, or say they are all busy
 * (CTL_MAX_QUEUED wait already).
 */
static void ctl_queue(struct rfs_ctl *c, struct ctl_conn *conn)
{
	conn->c = c;
	conn->w.fn = ctl_work;
	if (rft_wq_queue(c->wq, &conn->w, RFT_WQ_HIGH) < 0)
		ctl_close(conn, ctl_busy);
}

/* Requests that waited CTL_BUSY_MS for a worker: the busy answer. */
static void ctl_expire_queue(struct rfs_ctl *c, uint64_t now)
{
	struct rft_wq_item *old, *w;

	if (now < CTL_BUSY_MS)
		return;
	old = rft_wq_take_back(c->wq, RFT_WQ_HIGH, now - CTL_BUSY_MS);
	while ((w = old)) {
		old = w->next;
		ctl_close((struct ctl_conn *)w, ctl_busy);
	}
}

/* When the oldest queued request runs out of time; UINT64_MAX: none. */
static uint64_t ctl_queue_deadline(struct rfs_ctl *c)
{
	uint64_t t = rft_wq_oldest_ms(c->wq, RFT_WQ_HIGH);

	return t == UINT64_MAX ? t : t + CTL_BUSY_MS;
}

/*
 * Read what @conn has sent, without blocking.  Returns 1 while its line
 * is incomplete, 0 once @conn is dealt with: queued for a worker, or
 * answered (a bad line) or dropped (gone) and freed.
 */
static int ctl_read_line(struct rfs_ctl *c, struct ctl_conn *conn)
{
	char msg[96], *nl;
	ssize_t n;

	for (;;) {
		n = recv(conn->fd, conn->line + conn->len,
			 RFS_CTL_MAX_LINE - conn->len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 1;
		if (n < 0 || (n == 0 && !conn->len)) {
			ctl_close(conn, NULL); /* gone before a word */
			return 0;
		}
		if (n == 0) {
			conn->eof = true; /* EOF also ends the line */
			break;
		}
		nl = memchr(conn->line + conn->len, '\n', (size_t)n);
		conn->len += (size_t)n;
		if (nl) {
			conn->len = (size_t)(nl - conn->line);
			break;
		}
		if (conn->len == RFS_CTL_MAX_LINE) {
			snprintf(msg, sizeof(msg),
				 "e request longer than %d bytes\nx %d\n",
				 RFS_CTL_MAX_LINE - 1, CTL_EXIT_USAGE);
			ctl_close(conn, msg);
			return 0;
		}
	}
	if (memchr(conn->line, '\0', conn->len)) {
		ctl_close(conn, "e malformed request: NUL byte\nx 2\n");
		return 0;
	}
	if (conn->len && conn->line[conn->len - 1] == '\r')
		conn->len--;
	conn->line[conn->len] = '\0';
	ctl_queue(c, conn);
	return 0;
}

/* Take connection @i out of the pending set, which stays in order. */
static void ctl_unpend(struct rfs_ctl *c, unsigned i)
{
	memmove(&c->pending[i], &c->pending[i + 1],
		(c->npending - i - 1) * sizeof(c->pending[0]));
	c->npending--;
}

/* Answer pending connection @i with @msg (NULL: nothing) and close it. */
static void ctl_forget(struct rfs_ctl *c, unsigned i, const char *msg)
{
	ctl_close(c->pending[i], msg);
	ctl_unpend(c, i);
}

/*
 * Take one connection from the backlog.  Returns 0, -EAGAIN when there is
 * none, or another -errno from accept().
 */
static int ctl_accept_one(struct rfs_ctl *c)
{
	struct ctl_conn *conn;
	socklen_t len;
	char msg[128];
	int fd;

	fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	conn = calloc(1, sizeof(*conn));
	if (!conn) {
		close(fd);
		return -ENOMEM;
	}
	conn->fd = fd;
	conn->since = rft_now_ms();
	len = sizeof(conn->cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &conn->cred, &len) < 0) {
		rft_warn("control socket: no peer credentials: %s",
			 strerror(errno));
		ctl_close(conn, NULL);
		return 0;
	}
	if (conn->cred.uid != 0 && conn->cred.uid != geteuid()) {
		rft_warn("control socket: refused uid %u (pid %d)",
			 (unsigned)conn->cred.uid, (int)conn->cred.pid);
		snprintf(msg, sizeof(msg),
			 "e permission denied: only root and uid %u may use "
			 "this socket\nx 1\n",
			 (unsigned)geteuid());
		ctl_close(conn, msg);
		return 0;
	}
	/* The line is often there already: no pending slot for it then. */
	c->pending[c->npending++] = conn;
	if (!ctl_read_line(c, conn))
		c->npending--;
	return 0;
}

/* Is a connection waiting in the backlog? */
static bool ctl_backlog(struct rfs_ctl *c)
{
	struct pollfd p = { .fd = c->lfd, .events = POLLIN };

	return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/*
 * Accept what the backlog holds.  Connections that have not sent their
 * line yet wait in the pending set; when it is full, the oldest makes
 * room once it has been silent CTL_IDLE_MS.  Returns 0 once the backlog
 * is empty, 1 when it must wait for the oldest to be that old, or the
 * -errno of a failed accept().
 */
static int ctl_accept(struct rfs_ctl *c, uint64_t now)
{
	char msg[128];
	int rc;

	for (;;) {
		if (c->npending == CTL_MAX_PENDING) {
			if (c->pending[0]->since + CTL_IDLE_MS > now)
				return 1;
			if (!ctl_backlog(c))
				return 0;
			snprintf(msg, sizeof(msg),
				 "e no request line, and %d other connections "
				 "wait for theirs: closed\nx %d\n",
				 CTL_MAX_PENDING - 1, CTL_EXIT_USAGE);
			ctl_forget(c, 0, msg);
		}
		rc = ctl_accept_one(c);
		if (rc == -EAGAIN)
			return 0;
		if (rc < 0 && rc != -EINTR && rc != -ECONNABORTED &&
		    rc != -EPROTO)
			return rc;
	}
}

/*
 * The acceptor: it never blocks on a client.  It polls the listening
 * socket and the pending connections, reads request lines as they come,
 * hands complete ones to the workers, and answers by itself what needs no
 * engine (a bad line, no line in time, busy, refused).
 */
static void *ctl_accept_main(void *arg)
{
	struct rfs_ctl *c = arg;
	struct pollfd pfd[2 + CTL_MAX_PENDING];
	uint64_t now, until, backoff = 0;
	bool warned = false, listen_wait = false;
	char msg[64];
	unsigned i, n;
	int rc, ms;

	pthread_setname_np(pthread_self(), "rft-ctl");
	for (;;) {
		now = rft_now_ms();
		/* What times out first: a pending line, a queued request. */
		until = ctl_queue_deadline(c);
		if (c->npending && c->pending[0]->since + CTL_IO_MS < until)
			until = c->pending[0]->since + CTL_IO_MS;
		if (backoff && backoff < until)
			until = backoff;
		if (listen_wait && c->npending &&
		    c->pending[0]->since + CTL_IDLE_MS < until)
			until = c->pending[0]->since + CTL_IDLE_MS;
		ms = until == UINT64_MAX ? -1
		     : until <= now	 ? 0
					 : (int)(until - now);

		pfd[0] = (struct pollfd){ .fd = c->wakefd, .events = POLLIN };
		/* After a resource error, or with no room: not the backlog. */
		pfd[1] = (struct pollfd){
			.fd = backoff || listen_wait ? -1 : c->lfd,
			.events = POLLIN
		};
		for (i = 0; i < c->npending; i++)
			pfd[2 + i] = (struct pollfd){ .fd = c->pending[i]->fd,
						      .events = POLLIN };
		n = c->npending;
		if (poll(pfd, 2 + n, ms) < 0 && errno != EINTR) {
			rft_err("control socket: poll: %s", strerror(errno));
			backoff = rft_now_ms() + CTL_BACKOFF_MS;
			continue;
		}
		if (pfd[0].revents)
			break;
		now = rft_now_ms();

		/* Lines that came in; pending[] shrinks as they complete. */
		for (i = n; i-- > 0;)
			if (pfd[2 + i].revents &&
			    !ctl_read_line(c, c->pending[i]))
				ctl_unpend(c, i);
		snprintf(msg, sizeof(msg),
			 "e no request line within %d s\nx %d\n",
			 CTL_IO_MS / 1000, CTL_EXIT_USAGE);
		while (c->npending &&
		       c->pending[0]->since + CTL_IO_MS <= now)
			ctl_forget(c, 0, msg);
		ctl_expire_queue(c, now);

		if (backoff && now < backoff)
			continue;
		backoff = 0;
		if (!listen_wait && !(pfd[1].revents & POLLIN)) {
			if (pfd[1].revents) /* POLLERR: do not spin on it */
				backoff = now + CTL_BACKOFF_MS;
			continue;
		}
		rc = ctl_accept(c, now);
		listen_wait = rc == 1;
		if (rc < 0) {
			/* EMFILE, ENFILE, ENOBUFS, ENOMEM: back off. */
			if (!warned)
				rft_warn("control socket: accept: %s",
					 rfs_ctl_err_name(rc));
			warned = true;
			backoff = now + CTL_BACKOFF_MS;
		} else {
			warned = false;
		}
	}
	/* Stopping: nobody is answered that has not asked yet. */
	while (c->npending)
		ctl_forget(c, c->npending - 1, NULL);
	return NULL;
}

/* --- socket setup ------------------------------------------------------- */

/*
 * Create the directories above @path (the last one 0700) and check that
 * the one holding the socket is ours or root's and not open to others.
 */
static int ctl_mkparent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct stat st;
	char *p;

	snprintf(dir, sizeof(dir), "%s", path);
	p = strrchr(dir, '/');
	if (!p)
		return 0; /* relative, in the working directory */
	if (p == dir)
		p[1] = '\0';
	else
		*p = '\0';
	for (p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			rft_err("control socket directory %s: %s", dir,
				strerror(errno));
			return -errno;
		}
		*p = '/';
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rft_err("control socket directory %s: %s", dir,
			strerror(errno));
		return -errno;
	}
	if (stat(dir, &st) < 0) {
		rft_err("control socket directory %s: %s", dir,
			strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		rft_err("control socket directory %s is not a directory", dir);
		return -ENOTDIR;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		rft_err("control socket directory %s belongs to uid %u, not "
			"to us (uid %u)",
			dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		rft_err("control socket directory %s is writable by others "
			"(mode %04o)",
			dir, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Something is at @path: -EADDRINUSE if a server answers there, 0 once a
 * stale socket is removed (or it vanished), else -errno.
 */
static int ctl_probe(const struct sockaddr_un *sa)
{
	const char *path = sa->sun_path;
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		rft_err("control socket %s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		rft_err("control socket %s: exists and is not a socket", path);
		return -EEXIST;
	}
	/* Non-blocking: a live server with a full backlog says EAGAIN. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rft_err("control socket: socket: %s", strerror(errno));
		return -errno;
	}
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	rc = rc < 0 ? -errno : 0;
	close(fd);
	switch (rc) {
	case 0:
	case -EAGAIN:
	case -EINPROGRESS:
		rft_err("control socket %s is in use by another reftfsd",
			path);
		return -EADDRINUSE;
	case -ECONNREFUSED:
		rft_info("control socket %s: removing a stale socket", path);
		if (unlink(path) < 0 && errno != ENOENT) {
			rft_err("control socket %s: unlink: %s", path,
				strerror(errno));
			return -errno;
		}
		return 0;
	case -ENOENT:
		return 0;
	default:
		rft_err("control socket %s: probing it: %s", path,
			rfs_ctl_err_name(rc));
		return rc;
	}
}

static int ctl_listen(struct rfs_ctl *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int tries, rc;

	memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0);
	if (c->lfd < 0) {
		rc = -errno;
		rft_err("control socket: socket: %s", rfs_ctl_err_name(rc));
		return rc;
	}
	/* Linux gives the bound node the socket inode's mode: 0600 at once. */
	if (fchmod(c->lfd, 0600) < 0)
		rft_dbg("control socket: fchmod: %s", strerror(errno));
	for (tries = 0;; tries++) {
		if (bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		rc = -errno;
		if (rc != -EADDRINUSE || tries == 2) {
			rft_err("control socket %s: bind: %s", c->path,
				rfs_ctl_err_name(rc));
			return rc;
		}
		rc = ctl_probe(&sa);
		if (rc < 0)
			return rc;
	}
	if (chmod(c->path, 0600) < 0 || lstat(c->path, &st) < 0) {
		rc = -errno;
		rft_err("control socket %s: %s", c->path, rfs_ctl_err_name(rc));
		unlink(c->path);
		return rc;
	}
	c->sock_dev = st.st_dev;
	c->sock_ino = st.st_ino;
	/* Room for a burst of clients while the slots are busy. */
	if (listen(c->lfd, 128) < 0) {
		rc = -errno;
		rft_err("control socket %s: listen: %s", c->path,
			rfs_ctl_err_name(rc));
		unlink(c->path);
		c->sock_ino = 0;
		return rc;
	}
	return 0;
}

/* Unlink the socket node if it is still the one we bound. */
static void ctl_unlink(struct rfs_ctl *c)
{
	struct stat st;

	if (!c->sock_ino || lstat(c->path, &st) < 0)
		return;
	if (st.st_dev == c->sock_dev && st.st_ino == c->sock_ino &&
	    unlink(c->path) < 0)
		rft_warn("control socket %s: unlink: %s", c->path,
			 strerror(errno));
}

int rfs_ctl_new(struct eng *e, const char *path, struct rfs_ctl **out)
{
	struct rfs_ctl *c;
	int i, rc;

	*out = NULL;
	if (!path || !*path) {
		rft_err("control socket: no path");
		return -EINVAL;
	}
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		rft_err(
		    "control socket path %s is too long (at most %zu bytes)",
		    path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return -ENAMETOOLONG;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->e = e;
	c->lfd = -1;
	c->wakefd = -1;
	for (i = 0; i < RFS_CTL_MAX_CLIENTS; i++)
		c->serving[i] = -1;
	rc = pthread_mutex_init(&c->lock, NULL);
	if (rc)
		goto fail_lock;
	rc = pthread_cond_init(&c->done, NULL);
	if (rc)
		goto fail_done;
	rc = rft_wq_new("rft-ctl-cmd", RFS_CTL_MAX_CLIENTS, &c->wq);
	if (rc < 0)
		goto fail;
	rft_wq_set_max(c->wq, RFT_WQ_HIGH, CTL_MAX_QUEUED);
	c->path = strdup(path);
	if (!c->path) {
		rc = -ENOMEM;
		goto fail;
	}
	c->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wakefd < 0) {
		rc = -errno;
		rft_err("control socket: eventfd: %s", rfs_ctl_err_name(rc));
		goto fail;
	}
	rc = ctl_mkparent(path);
	if (rc < 0)
		goto fail;
	rc = ctl_listen(c);
	if (rc < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	rfs_ctl_free(c);
	return rc;
fail_done:
	pthread_mutex_destroy(&c->lock);
fail_lock:
	free(c);
	return -rc;
}

/* Is a worker serving a request?  c->lock held. */
static bool ctl_serving(const struct rfs_ctl *c)
{
	for (unsigned i = 0; i < RFS_CTL_MAX_CLIENTS; i++)
		if (c->serving[i] >= 0)
			return true;
	return false;
}

/*
 * Stop the threads that were started.  Queued requests and clients in
 * the middle of "flush --wait" hear that reftfsd is stopping; a worker
 * still blocked in a send after CTL_GRACE_MS has its socket shut.
 */
static void ctl_stop(struct rfs_ctl *c)
{
	struct rft_wq_item *queued, *w;
	struct timespec until;
	uint64_t one = 1;

	if (write(c->wakefd, &one, sizeof(one)) != sizeof(one))
		rft_err("control socket: cannot wake its threads: %s",
			strerror(errno));
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_mutex_unlock(&c->lock);
	if (c->acceptor_started)
		pthread_join(c->acceptor, NULL);
	c->acceptor_started = false;

	/* Nothing is queued any more: the acceptor is gone. */
	queued = rft_wq_take_back(c->wq, RFT_WQ_HIGH, UINT64_MAX);
	while ((w = queued)) {
		queued = w->next;
		ctl_close((struct ctl_conn *)w, ctl_stopping);
	}

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += CTL_GRACE_MS * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&c->lock);
	while (ctl_serving(c))
		if (pthread_cond_timedwait(&c->done, &c->lock, &until) ==
		    ETIMEDOUT)
			break;
	for (unsigned i = 0; i < RFS_CTL_MAX_CLIENTS; i++)
		if (c->serving[i] >= 0)
			shutdown(c->serving[i], SHUT_RDWR);
	pthread_mutex_unlock(&c->lock);
	rft_wq_stop(c->wq, RFT_WQ_CANCEL);
	c->workers_started = false;
}

void rfs_ctl_set_group(struct rfs_ctl *c, struct grp *g)
{
	c->g = g;
}

void rfs_ctl_set_fuse(struct rfs_ctl *c, struct rfs_fuse_info *f)
{
	c->fuse = f;
}

int rfs_ctl_start(struct rfs_ctl *c)
{
	sigset_t all, old;
	int rc = 0;

	if (c->acceptor_started || c->workers_started)
		return -EALREADY;
	/* Signals belong to the FUSE loop: our threads inherit a full mask. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = rft_wq_start(c->wq);
	c->workers_started = rc == 0;
	if (rc == 0)
		rc = -pthread_create(&c->acceptor, NULL, ctl_accept_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		rft_err("control socket: cannot start its threads: %s",
			strerror(-rc));
		ctl_stop(c);
		return rc;
	}
	c->acceptor_started = true;
	return 0;
}

void rfs_ctl_free(struct rfs_ctl *c)
{
	if (!c)
		return;
	if (c->acceptor_started || c->workers_started)
		ctl_stop(c);
	rft_wq_free(c->wq);
	if (c->lfd >= 0) {
		ctl_unlink(c);
		close(c->lfd);
	}
	if (c->wakefd >= 0)
		close(c->wakefd);
	pthread_cond_destroy(&c->done);
	pthread_mutex_destroy(&c->lock);
	free(c->path);
	free(c);
}
