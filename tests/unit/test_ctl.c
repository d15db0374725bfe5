/*
 * test_ctl.c - the control socket server and its commands (fs/ctl*.c),
 * over a real Unix socket, against a fake engine: they know the engine
 * only through engine.h, and the eng_* reporting calls below stand in for
 * it, so that every answer is known in advance: framing, escaping of
 * hostile names, exit codes, malformed requests, flush --wait progress,
 * clients that vanish, and the socket's own life (mode, stale and live
 * sockets).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ctl.h"
#include "engine.h"
#include "group.h"

/* --- the fake engine ---------------------------------------------------- */

/* engine.h leaves struct eng opaque: the fake one holds what it reports. */
struct eng {
	struct eng_config cfg;
};

const struct eng_config *eng_get_config(struct eng *e)
{
	return &e->cfg;
}

int rft_log_max = RFT_LOG_WARN;

void rft_log(int level, const char *func, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "log %d %s:%d: ", level, func, line);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

const char *eng_state_name(enum eng_state s)
{
	static const char *const n[] = { "lost", "writing", "sealed",
					 "protected", "persisted" };

	return (unsigned)s < 5 ? n[s] : "unknown";
}

const char *eng_crc_state_name(enum eng_crc_state s)
{
	static const char *const n[] = { "pending", "ok", "unverified",
					 "bad" };

	return (unsigned)s < 4 ? n[s] : "unknown";
}

/*
 * The fake log: 0 node 2 leads, 1 not started (first start waiting), 2 not
 * started in a registry group that has not named node 2 yet, 3 node 2
 * leads in a registry group that has not named node 0 to this one.
 */
static int fake_log_state;
static uint64_t fake_taken_over_by;	/* grp_info.taken_over_by */

/* group.h leaves struct grp opaque: the fake one is three nodes. */
struct grp {
	int unused;
};

const char *grp_member_state_name(enum grp_member_state st)
{
	static const char *const n[] = { "self", "unknown", "up", "suspect",
					 "dead" };

	return (unsigned)st < 5 ? n[st] : "?";
}

/* What the last "group force-remove" asked for (fake_force_remove). */
static int fake_removed[8], fake_nremoved;

int grp_force_remove(struct grp *g, const int *nodes, int n, char *msg,
		     size_t len)
{
	fake_nremoved = n < 8 ? n : 8;
	memcpy(fake_removed, nodes, sizeof(int) * (size_t)fake_nremoved);
	if (nodes[0] == 1) {
		snprintf(msg, len, "node 1 is this node");
		return -EINVAL;
	}
	snprintf(msg, len, "forced");
	return 0;
}

int grp_get_info(struct grp *g, struct grp_info *info,
		 struct grp_member_info *m, int max)
{
	memset(info, 0, sizeof(*info));
	info->self = 1;
	info->nodes = 3;
	snprintf(info->name, sizeof(info->name), "g0");
	info->epoch = 7;
	info->incarnation = 1700000000000000001ULL;
	info->dead_after_ms = 5000;
	info->taken_over_by = fake_taken_over_by;
	/* The namespace log: node 2 leads term 4. */
	info->log = true;
	snprintf(info->log_dir, sizeof(info->log_dir),
		 "/var/lib/reftfs/g0/node1");
	snprintf(info->log_addr, sizeof(info->log_addr), "127.0.0.1:7072");
	info->log_term = 4;
	info->log_leader = 2;
	info->log_commit_index = 17;
	info->log_last_index = 18;
	info->log_applied_index = 16;
	info->log_raft_id = 2;
	info->log_voters = 3;
	info->log_auth_failed = 5;
	info->log_bad_handshakes = 1;
	if (fake_log_state == 1 || fake_log_state == 2) {
		info->log_term = 0;
		info->log_leader = -1;
		info->log_commit_index = 0;
		info->log_raft_id = 0;
		info->log_voters = 0;
	}
	if (fake_log_state >= 2) {
		info->registry = true;
		info->log_addrs_unknown = 1;
	}
	assert_true(max >= 3);
	memset(m, 0, 3 * sizeof(*m));
	for (int i = 0; i < 3; i++) {
		m[i].id = i;
		snprintf(m[i].addr, sizeof(m[i].addr), "127.0.0.1:%d",
			 7070 + i);
	}
	m[0].state = GRP_MEMBER_UP;
	m[0].incarnation = 42;
	m[0].heard_ms_ago = 120;
	m[0].link_up = true;
	m[0].bytes_in = 4096;
	m[1].state = GRP_MEMBER_SELF;
	m[1].incarnation = info->incarnation;
	m[2].state = GRP_MEMBER_DEAD;
	m[2].incarnation = 43;
	m[2].heard_ms_ago = 9000;
	m[2].auth_failed = 2;
	return 3;
}

/*
 * Protection as the fake engine reports it: replicate:2 with 3 files of
 * this node to protect, one more protected at each call; a holder dead
 * when fake_holder_dead >= 0; a rebuild of 4 files that brings one back
 * per call.  fake_prot_calls counts the calls.
 */
static _Atomic bool fake_in_group;
static _Atomic unsigned fake_copies = 2;
static _Atomic bool fake_parity;
static _Atomic int fake_holder_dead = -1;
/* Files of this node the fake says are lost (eng_list_lost). */
static _Atomic unsigned fake_lost;
/* One file's protection refused by node 2 for want of memory. */
static _Atomic bool fake_stalled;
/* A piece a lost node left in rows here, taken out at the 5th call. */
static _Atomic bool fake_stale;
static _Atomic unsigned fake_prot_calls;

static _Atomic bool fake_behind; /* not caught up with the log yet */

bool eng_in_group(const struct eng *e)
{
	(void)e;
	return fake_in_group;
}

bool eng_group_caught_up(struct eng *e)
{
	(void)e;
	return !fake_in_group || !fake_behind;
}

void eng_log_stats(struct eng *e, struct eng_log_stats *st)
{
	(void)e;
	memset(st, 0, sizeof(*st));
	st->proposed = 7;
	st->waits = 5;
}

void eng_protect_stats(struct eng *e, struct eng_protect_stats *st)
{
	unsigned n = fake_prot_calls++;

	(void)e;
	memset(st, 0, sizeof(*st));
	st->holder_dead = fake_holder_dead;
	st->copies = fake_copies;
	if (fake_parity) {
		/* xor across 3 nodes: rows held, a read rebuilt. */
		st->copies = 0;
		snprintf(st->scheme, sizeof(st->scheme), "xor:2");
		st->parity_rows = 3;
		st->parity_bytes = 3 << 20;
		st->pieces_rebuilt = 2;
		st->bytes_rebuilt = 2 << 20;
		return;
	}
	if (st->copies < 2)
		return;
	snprintf(st->scheme, sizeof(st->scheme), "replicate:%u", st->copies);
	st->files_unprotected = n < 3 ? 3 - n : 0;
	st->files_protected = n < 3 ? n : 3;
	st->bytes_held = 5 << 20;
	st->bytes_sent = 3 << 20;
	st->rebuild_files = 4;
	st->rebuild_done = n < 4 ? n : 4;
	st->rebuild_bytes = st->rebuild_done << 20;
	st->rebuilding = n < 4;
	st->files_lost = fake_lost;
	st->parity_stale = fake_stale && n < 5;
	st->stalled_holder = -1;
	if (fake_stalled && st->files_unprotected) {
		st->files_stalled = 1;
		st->stalled_holder = 2;
		st->stalled_err = -ENOSPC;
	}
}


long eng_list_lost(struct eng *e, bool mine, unsigned max, eng_path_fn fn,
		   void *ctx)
{
	char path[64];

	(void)e;
	(void)mine;
	for (unsigned i = 0; fn && i < fake_lost && i < max; i++) {
		snprintf(path, sizeof(path), "step_100/lost\n%u.pt", i);
		if (fn(ctx, path))
			break;
	}
	return fake_lost;
}

/* Names that try to break lines, quotes, terminals and UTF-8. */
static const char *const ck_names[] = {
	"step_100",
	"q\"uo\\te\nnl",
	"bad\xff utf8 \xe2\x80\xa8sep",
	"\x1b[31mred",
};
#define NCK 4

/*
 * Set by the tests while ctl's client threads may still be reading them
 * (a client that vanished mid-flush streams on until it notices): atomic.
 */
static _Atomic bool fake_persist = true;
static _Atomic int fake_flush_error; /* -errno the flush ends with */
static _Atomic unsigned fake_flush_steps = 3; /* calls until finished */
static char fake_last_path[4096];
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t fake_tickets;
static unsigned fake_calls[64]; /* eng_flush_progress calls per ticket */

void eng_get_stats(struct eng *e, struct eng_stats *s)
{
	memset(s, 0, sizeof(*s));
	s->mem_budget = 1ULL << 30;
	s->mem_used = 256ULL << 20;
	s->chunk_size = 1 << 20;
	s->chunks_total = 1024;
	s->chunks_used = 256;
	s->files = 7;
	s->dirs = 1;
	s->checkpoints = NCK;
	s->write_bytes = 123456789;
	s->persist_enabled = fake_persist;
	s->persist_healthy = !fake_flush_error;
	s->persist_errors = fake_flush_error ? 1 : 0;
	if (fake_flush_error)
		snprintf(s->persist_last_error, sizeof(s->persist_last_error),
			 "cannot write back a\nb: No space left on device");
	s->start_time = time(NULL) - 90;
}

int eng_list_checkpoints(struct eng *e, eng_ckpt_fn fn, void *ctx)
{
	for (unsigned i = 0; i < NCK; i++) {
		struct eng_ckpt_info ci = {
			.name = ck_names[i],
			.seq = i + 1,
			.state = (enum eng_state)(i + ENG_STATE_WRITING),
			.files = i,
			.bytes = (uint64_t)i << 20,
			.bytes_resident = (uint64_t)i << 19,
			.in_keep_window = i >= 2,
			.persist_selected = i == 0,
		};
		int rc = fn(ctx, &ci);

		if (rc)
			return rc;
	}
	return 0;
}

/*
 * "wait": "step_100" is writing at the first look, sealed at the second,
 * protected from the third on; "stuck" stays sealed, "gone" has a lost
 * file, "nope" is absent.
 */
static unsigned fake_path_calls;

int eng_path_state(struct eng *e, const char *path, struct eng_ckpt_info *ci)
{
	unsigned n = fake_path_calls++;

	(void)e;
	snprintf(fake_last_path, sizeof(fake_last_path), "%s", path);
	*ci = (struct eng_ckpt_info){ .name = path, .files = 2,
				      .bytes = 2 << 20 };
	if (!strcmp(path, "nope"))
		return -ENOENT;
	if (!strcmp(path, "gone")) {
		ci->state = ENG_STATE_LOST;
		ci->files_lost = ci->files_sealed = 1;
	} else if (!strcmp(path, "stuck") || n == 1) {
		ci->state = ENG_STATE_SEALED;
		ci->files_sealed = 2;
	} else if (n == 0) {
		ci->state = ENG_STATE_WRITING;
		ci->files_writing = 2;
	} else {
		ci->state = ENG_STATE_PROTECTED;
		ci->files_sealed = ci->files_protected = 2;
	}
	return 0;
}

/* "ls" of a directory: /step_100 (inode 2) with fake_tree_files files. */
static unsigned fake_tree_files = 2;

int eng_ino_state(struct eng *e, uint64_t ino, struct eng_ckpt_info *ci)
{
	(void)e;
	if (ino != 2)
		return -ENOENT;
	*ci = (struct eng_ckpt_info){
		.seq = 1,
		.state = fake_tree_files ? ENG_STATE_PROTECTED
					 : ENG_STATE_PERSISTED,
		.files = fake_tree_files,
		.bytes = (uint64_t)fake_tree_files << 20,
		.files_sealed = fake_tree_files,
		.files_protected = fake_tree_files,
	};
	return 0;
}

int eng_list_path(struct eng *e, const char *path, eng_entry_fn fn,
		  void *ctx)
{
	struct eng_entry_info d = { .path = "step_100", .ino = 2,
				    .mode = S_IFDIR | 0755 };
	struct eng_entry_info f = {
		.path = "step_100/we\"ird\nname.pt",
		.ino = 3,
		.mode = S_IFREG | 0644,
		.size = 3 << 20,
		.state = ENG_STATE_SEALED,
		.crc = ENG_CRC_FINAL,
		.chunks = 3,
		.chunks_resident = 3,
		.tier = "ram",
		.owner = -1,
	};
	int rc;

	/* In a group: owned by node 1, a copy on node 2. */
	if (fake_in_group) {
		f.owner = 1;
		f.holders = 1u << 1 | 1u << 2;
	}
	snprintf(fake_last_path, sizeof(fake_last_path), "%s", path);
	if (!strcmp(path, ""))
		return fn(ctx, &d);
	if (!strcmp(path, "step_100")) {
		rc = fn(ctx, &f);
		if (!rc)
			rc = fn(ctx, &f);
		return rc;
	}
	return -ENOENT;
}

/* Two pieces of /step_100/a.pt: one in RAM, one on peers, crc unknown. */
int eng_list_pieces(struct eng *e, const char *path, eng_piece_fn fn,
		    void *ctx)
{
	struct eng_piece_info p[2] = {
		{ .index = 0, .len = 1 << 20, .crc = 0xdeadbeef,
		  .crc_known = true, .here = "ram", .owner = -1 },
		{ .index = 1, .len = 4096, .here = "peers", .owner = -1 },
	};
	int rc = 0;

	(void)e;
	snprintf(fake_last_path, sizeof(fake_last_path), "%s", path);
	if (strcmp(path, "step_100/a.pt"))
		return strcmp(path, "step_100") ? -ENOENT : -EISDIR;
	for (int i = 0; i < 2 && rc == 0; i++) {
		if (fake_in_group) {
			p[i].owner = 1;
			p[i].holders = 1u << 1 | 1u << 2;
			p[i].seal = 59;
		}
		rc = fn(ctx, &p[i]);
	}
	return rc;
}

/*
 * verify: a.pt checked on nodes 1 and 2 (node 2 with a bad piece when
 * fake_verify_bad), b.pt being written, c.pt's holder down.
 */
static _Atomic bool fake_verify_bad;

int eng_verify(struct eng *e, const char *path, bool repair, eng_verify_fn fn,
	       void *ctx)
{
	struct eng_verify_info *vi = calloc(1, sizeof(*vi));
	int rc = 0;

	(void)e;
	assert_non_null(vi);
	snprintf(fake_last_path, sizeof(fake_last_path), "%s", path);
	if (strcmp(path, "step_100") && strcmp(path, "")) {
		free(vi);
		return -ENOENT;
	}
	*vi = (struct eng_verify_info){ .path = "step_100/a.pt",
					.size = 3 << 20, .pieces = 3,
					.sealed = true, .owner = 1,
					.ncopies = 2 };
	vi->copy[0] = (struct eng_verify_copy){ .node = 1, .checked = 3,
						.bytes = 3 << 20 };
	vi->copy[1] = (struct eng_verify_copy){ .node = 2, .checked = 3,
						.bytes = 3 << 20 };
	if (fake_verify_bad) {
		vi->copy[1].bad = 1;
		vi->copy[1].first_bad = 2;
		/* This node (1) owns it: node 2's copy is sent again. */
		vi->copy[1].repaired = repair;
	}
	rc = fn(ctx, vi);
	if (rc == 0) {
		*vi = (struct eng_verify_info){ .path = "step_100/b.pt",
						.owner = 1 };
		rc = fn(ctx, vi);
	}
	if (rc == 0) {
		*vi = (struct eng_verify_info){ .path = "step_100/c.pt",
						.size = 4096, .pieces = 1,
						.sealed = true, .owner = 0,
						.ncopies = 1 };
		vi->copy[0] = (struct eng_verify_copy){ .node = 0,
							.rc = -EHOSTDOWN };
		rc = fn(ctx, vi);
	}
	free(vi);
	return rc;
}

/* Node 0 holds 5 MiB of this node's files, this node 2 MiB of node 2's. */
void eng_copy_bytes(struct eng *e, uint64_t there[64], uint64_t here[64])
{
	(void)e;
	memset(there, 0, 64 * sizeof(*there));
	memset(here, 0, 64 * sizeof(*here));
	there[0] = 5 << 20;
	here[2] = 2 << 20;
}

int eng_flush_request(struct eng *e, uint64_t *ticket)
{
	pthread_mutex_lock(&fake_lock);
	*ticket = ++fake_tickets % 64;
	fake_calls[*ticket] = 0;
	pthread_mutex_unlock(&fake_lock);
	return 0;
}

int eng_flush_progress(struct eng *e, uint64_t ticket,
		       struct eng_flush_progress *p)
{
	unsigned n, steps = fake_flush_steps;

	pthread_mutex_lock(&fake_lock);
	n = fake_calls[ticket % 64]++;
	pthread_mutex_unlock(&fake_lock);
	if (n > steps)
		n = steps;
	p->files_total = steps;
	p->files_done = n;
	p->bytes_total = (uint64_t)steps << 20;
	p->bytes_done = (uint64_t)n << 20;
	p->finished = n == steps;
	p->error = p->finished ? fake_flush_error : 0;
	return 0;
}

/* --- fixture and client ----------------------------------------------- */

struct fx {
	char dir[64];
	char path[128];
	struct eng e;
	struct grp g;
	struct rfs_ctl *c;
};

static bool with_group; /* setup: report on the fake group */

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/rftctl.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	/* A parent that does not exist yet: rfs_ctl_new makes it 0700. */
	snprintf(fx->path, sizeof(fx->path), "%s/run/ctl.sock", fx->dir);
	fx->e.cfg.mountpoint = "/mnt/ckpt";
	fx->e.cfg.persist_dir = "/nfs/ckpt";
	fx->e.cfg.keep = 2;
	fake_persist = true;
	fake_flush_error = 0;
	fake_flush_steps = 3;
	assert_int_equal(rfs_ctl_new(&fx->e, fx->path, &fx->c), 0);
	if (with_group)
		rfs_ctl_set_group(fx->c, &fx->g);
	assert_int_equal(rfs_ctl_start(fx->c), 0);
	*state = fx;
	return 0;
}

static int setup_group(void **state)
{
	int rc;

	with_group = true;
	fake_in_group = true;
	fake_prot_calls = 0;
	rc = setup(state);
	with_group = false;
	return rc;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char run[96];

	fake_in_group = false;
	rfs_ctl_free(fx->c);
	snprintf(run, sizeof(run), "%s/run", fx->dir);
	rmdir(run);
	rmdir(fx->dir);
	free(fx);
	return 0;
}

static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -errno;
	}
	return fd;
}

/* Send @req (@len bytes) and read the whole answer; NUL-terminated. */
static char *ask_n(struct fx *fx, const char *req, size_t len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	int fd = dial(fx->path);
	ssize_t r;

	assert_non_null(buf);
	assert_true(fd >= 0);
	assert_int_equal(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	for (;;) {
		if (n + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		r = recv(fd, buf + n, cap - n - 1, 0);
		assert_true(r >= 0);
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	return buf;
}

static char *ask(struct fx *fx, const char *req)
{
	return ask_n(fx, req, strlen(req));
}

/*
 * Check the framing of a whole answer: every line is "T text" with a
 * known tag, no byte below 0x20 but '\n' (a tab inside an 'o' line is
 * allowed), and the last line is "x CODE".  Returns CODE.
 */
static int frame_check(const char *a)
{
	const char *p = a, *nl, *last = NULL;
	int code = -1;

	assert_true(*a);
	assert_true(a[strlen(a) - 1] == '\n');
	for (; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		assert_non_null(nl);
		assert_non_null(strchr("oepx", p[0]));
		assert_true(p[1] == ' ');
		for (const char *q = p; q < nl; q++)
			assert_true((unsigned char)*q >= 0x20);
		last = p;
	}
	assert_true(last[0] == 'x');
	assert_int_equal(sscanf(last, "x %d", &code), 1);
	return code;
}

/* --- tests ------------------------------------------------------------- */

static void test_socket_mode(void **state)
{
	struct fx *fx = *state;
	char run[96];
	struct stat st;

	assert_int_equal(lstat(fx->path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(run, sizeof(run), "%s/run", fx->dir);
	assert_int_equal(stat(run, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
}

static void test_status_text(void **state)
{
	char *a = ask(*state, "status\n");

	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "o mount         /mnt/ckpt\n"));
	assert_non_null(strstr(a, "256.0 MiB of 1.0 GiB used (25.0%)"));
	assert_non_null(strstr(a, "/nfs/ckpt, healthy"));
	/* Hostile names come out escaped, on one line each. */
	assert_non_null(strstr(a, "q\"uo\\\\te\\nnl"));
	assert_non_null(strstr(a, "bad\\xff utf8 \\u2028sep"));
	assert_non_null(strstr(a, "\\x1b[31mred"));
	assert_null(strchr(a, '\x1b'));
	free(a);
}

static void test_status_json(void **state)
{
	char *a = ask(*state, "status --json\n");

	assert_int_equal(frame_check(a), 0);
	assert_true(!strncmp(a, "o {\"mountpoint\":\"/mnt/ckpt\"", 27));
	/* One JSON line, then the exit code. */
	assert_non_null(strstr(a, "}\nx 0\n"));
	assert_int_equal(strchr(a, '\n') - a + 1,
			 (long)(strlen(a) - strlen("x 0\n")));
	assert_non_null(strstr(a, "\"name\":\"q\\\"uo\\\\te\\nnl\""));
	assert_non_null(strstr(a, "\"name\":\"bad\\ufffd utf8 \\u2028sep\""));
	assert_non_null(strstr(a, "\"name\":\"\\u001b[31mred\""));
	assert_non_null(strstr(a, "\"used_percent\":25.0"));
	assert_non_null(strstr(a, "\"last_error\":null"));
	free(a);
}

static void test_status_error_shown(void **state)
{
	char *a;

	fake_flush_error = -ENOSPC;
	a = ask(*state, "status\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "FAILING"));
	assert_non_null(strstr(a, "cannot write back a\\nb: No space left"));
	free(a);
	a = ask(*state, "status --json\n");
	assert_non_null(strstr(a, "\"healthy\":false"));
	assert_non_null(strstr(a, "\"last_error\":\"cannot write back a\\nb"));
	free(a);
}

static void test_ls(void **state)
{
	char *a = ask(*state, "ls\n");

	assert_int_equal(frame_check(a), 0);
	assert_string_equal(fake_last_path, "");
	/* A directory: the weakest state of the files below it. */
	assert_non_null(strstr(a, "o protected        2097152  -"));
	assert_non_null(strstr(a, " /step_100/\n"));
	free(a);
	a = ask(*state, "ls --json\n");
	assert_non_null(strstr(a, "\"tree\":{\"name\":\"step_100\",\"seq\":1,"
				  "\"state\":\"protected\",\"files\":2,"));
	assert_non_null(strstr(a, "\"protected_files\":2,"));
	free(a);
	/* With no file below it, just a directory. */
	fake_tree_files = 0;
	a = ask(*state, "ls\n");
	assert_non_null(strstr(a, "o dir "));
	assert_non_null(strstr(a, " /step_100/\n"));
	free(a);
	fake_tree_files = 2;

	a = ask(*state, "ls //step_100/./x/..\n");
	assert_int_equal(frame_check(a), 0);
	assert_string_equal(fake_last_path, "step_100");
	assert_non_null(strstr(a, "o sealed "));
	assert_non_null(strstr(a, " 3145728  ram "));
	assert_non_null(strstr(a, " ok "));
	assert_non_null(strstr(a, " 3/3  -      /step_100/we\"ird\\nname.pt\n"));
	free(a);

	a = ask(*state, "ls \"/step_100\" --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(
		strstr(a, "o [{\"path\":\"/step_100/we\\\"ird\\nname.pt\""));
	assert_non_null(strstr(a, "\"state\":\"sealed\",\"checksum\":\"ok\""));
	assert_non_null(strstr(a, "}]\nx 0\n"));
	free(a);

	/* Above the root stays at the root. */
	a = ask(*state, "ls ../../..\n");
	assert_int_equal(frame_check(a), 0);
	assert_string_equal(fake_last_path, "");
	free(a);
}

static void test_checkpoints(void **state)
{
	char *a = ask(*state, "checkpoints\n");

	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "PROTECTED"));
	assert_non_null(strstr(a, "o step_100 "));
	/* The oldest writing, the newest persisted (fake_list_checkpoints). */
	assert_non_null(strstr(a, "o newest wholly protected: \\x1b[31mred\n"));
	assert_non_null(strstr(a, "o newest wholly persisted: \\x1b[31mred\n"));
	free(a);
	a = ask(*state, "checkpoints --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "\"protected_files\":"));
	assert_non_null(strstr(a, "\"newest_protected\":\"\\u001b[31mred\""));
	free(a);
}

static void test_wait(void **state)
{
	char *a;

	/* Writing, sealed, then protected: three looks, exit 0. */
	fake_path_calls = 0;
	a = ask(*state, "wait /step_100 --protected\n");
	assert_int_equal(frame_check(a), 0);
	assert_int_equal(fake_path_calls, 3);
	assert_non_null(strstr(a, "o /step_100: protected: 2 files (2.0 MiB) after "));
	free(a);
	/* A path under the mount point is taken relative to its root. */
	fake_path_calls = 0;
	a = ask(*state, "wait /mnt/ckpt/step_100 --sealed --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_string_equal(fake_last_path, "step_100");
	assert_non_null(strstr(a, "\"want\":\"sealed\",\"reached\":true"));
	free(a);
	/* Never persisted: exit 3 at the timeout, saying where it stands. */
	a = ask(*state, "wait stuck --persisted --timeout 0.3\n");
	assert_int_equal(frame_check(a), 3);
	assert_non_null(strstr(a, "o /stuck: not persisted after "));
	assert_non_null(strstr(a, "2 sealed, 0 protected"));
	free(a);
	/* A lost file: exit 1 at once, never a wait. */
	a = ask(*state, "wait gone --protected\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "e wait: /gone: incomplete: 1 file lost"));
	free(a);
	a = ask(*state, "wait nope --protected\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "e wait: /nope: No such file"));
	free(a);
	/* Usage: a state to wait for, a path, a timeout that is one. */
	a = ask(*state, "wait step_100\n");
	assert_int_equal(frame_check(a), 2);
	free(a);
	a = ask(*state, "wait --protected\n");
	assert_int_equal(frame_check(a), 2);
	free(a);
	a = ask(*state, "wait x --protected --timeout soon\n");
	assert_int_equal(frame_check(a), 2);
	assert_non_null(strstr(a, "bad --timeout 'soon'"));
	free(a);
	a = ask(*state, "wait x --protected --timeout\n");
	assert_int_equal(frame_check(a), 2);
	free(a);
	a = ask(*state, "status --protected\n");
	assert_int_equal(frame_check(a), 2);
	free(a);
}

static void test_ls_missing(void **state)
{
	char *a = ask(*state, "ls /nope\n");

	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "e ls: /nope: No such file or directory\n"));
	free(a);
	/* A path given with the mount point in front: a hint. */
	a = ask(*state, "ls /mnt/ckpt/step_9\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "try 'ls /step_9'"));
	free(a);
}

static void test_metrics(void **state)
{
	char *a = ask(*state, "metrics\n");

	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "o # TYPE reftfs_memory_used_bytes gauge\n"
				  "o reftfs_memory_used_bytes 268435456\n"));
	assert_non_null(strstr(a, "o # TYPE reftfs_write_bytes_total counter\n"
				  "o reftfs_write_bytes_total 123456789\n"));
	assert_non_null(strstr(a, "o reftfs_persist_healthy 1\n"));
	assert_non_null(strstr(a, "reftfs_checkpoint_bytes{checkpoint="
				  "\"q\\\"uo\\\\te\\nnl\"} 1048576\n"));
	/* Not UTF-8, line separators, controls: U+FFFD. */
	assert_non_null(strstr(a, "{checkpoint=\"bad\xef\xbf\xbd utf8 "
				  "\xef\xbf\xbdsep\"}"));
	assert_non_null(strstr(a, "{checkpoint=\"\xef\xbf\xbd[31mred\","
				  "state=\"persisted\"} 1\n"));
	free(a);

	a = ask(*state, "metrics --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "\"reftfs_memory_used_bytes\":268435456"));
	assert_non_null(strstr(a, "\"reftfs_checkpoint_files\":[{\"labels\":"
				  "{\"checkpoint\":\"step_100\"},"
				  "\"value\":0}"));
	free(a);
}

static void test_group(void **state)
{
	char *a = ask(*state, "group\n");

	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "g0, node 1 of 3, 2 up, view epoch 7"));
	assert_non_null(strstr(a, "static --peers, dead after 5000 ms"));
	assert_non_null(strstr(a, "127.0.0.1:7071"));
	assert_non_null(strstr(a, "self"));
	assert_non_null(strstr(a, "dead"));
	assert_non_null(strstr(a, "2 auth, 0 bad, 0 crc"));
	assert_non_null(strstr(a, "term 4, commit index 17 (last 18, "
				  "applied 16), 3 voters"));
	assert_non_null(strstr(a, "leader: node 2; this node follows"));
	assert_non_null(strstr(a, "raft on 127.0.0.1:7072, 5 links refused"));
	assert_non_null(strstr(a, "/var/lib/reftfs/g0/node1"));
	/* OURS THERE, THEIRS HERE: the copies each peer and this node hold. */
	assert_non_null(strstr(a, "   5.0 MiB          0 B  "));
	assert_non_null(strstr(a, "       0 B      2.0 MiB  "));
	free(a);

	a = ask(*state, "group --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "\"group\":{\"enabled\":true,\"name\":\"g0\""));
	assert_non_null(strstr(a, "{\"node\":\"2\",\"role\":\"data\","
				  "\"address\":\"127.0.0.1:7072\","
				  "\"state\":\"dead\""));
	assert_non_null(strstr(a, "\"log\":true"));
	assert_non_null(strstr(a, "\"log_role\":\"follower\""));
	assert_non_null(strstr(a, "\"log_term\":4"));
	assert_non_null(strstr(a, "\"log_leader\":2"));
	assert_non_null(strstr(a, "\"log_commit_index\":17"));
	assert_non_null(strstr(a, "\"log_auth_failed\":5"));
	free(a);

	/* status and metrics carry the group too. */
	a = ask(*state, "status\n");
	assert_non_null(strstr(a, "g0, node 1 of 3, 2 up"));
	assert_non_null(strstr(a, "namespace log term 4, leader node 2, "
				  "commit index 17"));
	free(a);
	a = ask(*state, "metrics\n");
	assert_non_null(strstr(a, "reftfs_peer_state{peer=\"2\",state=\"dead\"} 1"));
	assert_non_null(strstr(a, "reftfs_peer_auth_failed_total{peer=\"2\"} 2"));
	assert_non_null(strstr(a, "reftfs_group_up 2"));
	assert_non_null(strstr(a, "reftfs_group_log_term 4\n"));
	assert_non_null(strstr(a, "reftfs_group_log_leader 2\n"));
	assert_non_null(strstr(a, "reftfs_group_log_commit_index 17\n"));
	assert_non_null(strstr(a, "reftfs_group_log_auth_failed_total 5\n"));
	assert_non_null(strstr(a, "reftfs_group_taken_over 0\n"));
	assert_non_null(strstr(a, "reftfs_peer_copies_there_bytes{peer=\"0\"} 5242880\n"));
	assert_non_null(strstr(a, "reftfs_peer_copies_here_bytes{peer=\"2\"} 2097152\n"));
	free(a);
}

/* group force-remove NODE...: the ids reach the group; bad ones do not. */
static void test_group_force_remove(void **state)
{
	char *a;

	a = ask(*state, "group force-remove 2 0\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "group force-remove: forced"));
	assert_int_equal(fake_nremoved, 2);
	assert_int_equal(fake_removed[0], 2);
	assert_int_equal(fake_removed[1], 0);
	free(a);
	a = ask(*state, "group force-remove 1\n");
	assert_non_null(strstr(a, "refused: node 1 is this node"));
	assert_int_equal(frame_check(a), 1);
	free(a);
	fake_nremoved = 0;
	for (int i = 0; i < 3; i++) {
		static const char *const bad[] = {
			"group force-remove\n", "group force-remove x\n",
			"group forget 2\n",
		};

		a = ask(*state, bad[i]);
		assert_int_equal(frame_check(a), 2);
		free(a);
	}
	assert_int_equal(fake_nremoved, 0);
}

/* A daemon whose node was taken over says so everywhere. */
static void test_group_taken_over(void **state)
{
	static const char *const how[] = { "group\n", "status\n" };
	char *a;

	fake_taken_over_by = 1700000000000000009ULL;
	for (int i = 0; i < 2; i++) {
		a = ask(*state, how[i]);
		assert_non_null(strstr(a, "TAKEN OVER by a daemon started "
					  "later (incarnation "
					  "1700000000000000009): stop this "
					  "one"));
		free(a);
	}
	a = ask(*state, "metrics\n");
	assert_non_null(strstr(a, "reftfs_group_taken_over 1\n"));
	free(a);
	a = ask(*state, "group --json\n");
	assert_non_null(strstr(a, "\"taken_over_by\":1700000000000000009"));
	free(a);
	fake_taken_over_by = 0;
}

/* A log that has not started yet (its group's first start waits). */
static void test_group_log_waiting(void **state)
{
	char *a;

	fake_log_state = 1;
	a = ask(*state, "group\n");
	assert_non_null(strstr(a, "not running yet: the group's first start "
				  "needs every node up once"));
	assert_null(strstr(a, "leader:"));
	free(a);
	a = ask(*state, "status\n");
	assert_non_null(strstr(a, "namespace log term 0, no leader"));
	free(a);
	a = ask(*state, "metrics\n");
	assert_non_null(strstr(a, "reftfs_group_log_leader -1\n"));
	assert_non_null(strstr(a, "reftfs_group_log_addrs_unknown 0\n"));
	/* The log's counters, from eng_log_stats. */
	assert_non_null(strstr(a, "reftfs_group_log_proposed_total 7\n"));
	assert_non_null(strstr(a, "reftfs_group_log_waits_total 5\n"));
	assert_non_null(strstr(a, "reftfs_group_log_waits_capped_total 0\n"));
	free(a);
	fake_log_state = 0;
}

/* A registry group's log waits until the registry has named every node. */
static void test_group_log_registry_waiting(void **state)
{
	char *a;

	fake_log_state = 2;
	a = ask(*state, "group\n");
	assert_non_null(strstr(a, "memcached registry"));
	assert_non_null(strstr(a, "not running yet: waiting for the registry "
				  "to name every node (1 unknown)"));
	assert_null(strstr(a, "first start needs every node"));
	free(a);
	a = ask(*state, "group --json\n");
	assert_non_null(strstr(a, "\"log\":true"));
	assert_non_null(strstr(a, "\"log_addrs_unknown\":1"));
	free(a);
	a = ask(*state, "metrics\n");
	assert_non_null(strstr(a, "reftfs_group_log_addrs_unknown 1\n"));
	free(a);

	/* Running (a restart) with a peer not named yet. */
	fake_log_state = 3;
	a = ask(*state, "group\n");
	assert_non_null(strstr(a, "leader: node 2; this node follows"));
	assert_non_null(strstr(a, "no raft link yet to 1 node(s): the "
				  "registry has not named them"));
	assert_null(strstr(a, "not running yet"));
	free(a);
	fake_log_state = 0;
}

/* protect and rebuild: the state, progress until done, why not. */
static void test_protect_rebuild(void **state)
{
	char *a = ask(*state, "group\n");

	assert_non_null(strstr(a, "replicate:2: 3 files of this node not "
				  "protected, 0 protected since start, 3.0 MiB "
				  "sent, 5.0 MiB held for peers"));
	assert_non_null(strstr(a, "rebuild"));
	free(a);

	/* ls names each file's owner and the nodes with copies. */
	a = ask(*state, "ls /step_100\n");
	assert_non_null(strstr(a, " 3/3  1+2    /step_100/"));
	free(a);
	a = ask(*state, "ls /step_100 --json\n");
	assert_non_null(strstr(a, "\"owner\":1,\"holders\":\"1+2\","
				  "\"tree\":{\"name\":null,"));
	free(a);

	/* placement: each piece, here and on the group's nodes. */
	a = ask(*state, "placement /step_100/a.pt\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "    0    1048576  deadbeef  ram            1+2\n"));
	assert_non_null(strstr(a, "    1       4096  -         peers          1+2\n"));
	free(a);
	a = ask(*state, "placement /step_100/a.pt --json\n");
	assert_non_null(strstr(a, "\"here\":\"peers\",\"owner\":1,"
				  "\"nodes\":\"1+2\",\"seal\":59,\"stripe\":null,"
				  "\"slot\":null,\"stripe_data_nodes\":null,"
				  "\"stripe_parity_nodes\":null}"));
	free(a);
	a = ask(*state, "placement /step_100\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "placement: /step_100: Is a directory"));
	free(a);
	a = ask(*state, "placement\n");
	assert_int_equal(frame_check(a), 2);
	free(a);

	/* verify: a row per copy; bad pieces and unchecked copies fail. */
	a = ask(*state, "verify /step_100\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "NODE  RESULT     PIECES    BAD  ABSENT  PATH\n"));
	assert_non_null(strstr(a, "   1  ok              3      0       0  /step_100/a.pt\n"));
	assert_non_null(strstr(a, "   -  writing         -      -       -  /step_100/b.pt\n"));
	assert_non_null(strstr(a, "   0  down            -      -       -  /step_100/c.pt\n"));
	assert_non_null(strstr(a, "3 files: 2 copies checked, 6 pieces (6.0 MiB), 0 bad"));
	assert_non_null(strstr(a, "1 file is being written: not checked"));
	assert_non_null(strstr(a, "verify: 1 copy could not be checked"));
	assert_null(strstr(a, "bad piece"));
	free(a);
	fake_verify_bad = true;
	a = ask(*state, "verify --json\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "{\"path\":\"/step_100/a.pt\",\"node\":2,"
				  "\"result\":\"bad\",\"pieces_checked\":3,"
				  "\"pieces_bad\":1,\"first_bad_piece\":2,"));
	assert_non_null(strstr(a, "\"pieces_bad\":1,\"pieces_repaired\":0,\"bytes_checked\":6291456,"));
	assert_non_null(strstr(a, "verify: 1 bad piece: their bytes differ"));
	free(a);
	a = ask(*state, "verify /step_100 --repair\n");
	assert_int_equal(frame_check(a), 1); /* c.pt's holder is down */
	assert_non_null(strstr(a, "   2  resending       3      1       0  /step_100/a.pt\n"));
	assert_non_null(strstr(a, "1 bad piece put right"));
	assert_null(strstr(a, "bad piece:"));
	free(a);
	fake_verify_bad = false;
	a = ask(*state, "verify /nope\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "verify: /nope: No such file or directory"));
	free(a);

	fake_prot_calls = 1;
	a = ask(*state, "protect --wait\n");
	assert_int_equal(frame_check(a), 0);
	assert_true(!strncmp(a, "p 0 2 0 0 protect\n", 18));
	assert_non_null(strstr(a, "p 2 2 0 0 protect\n"
				  "o protect: replicate:2, 0 files of this "
				  "node not protected, 3 protected since "
				  "start\nx 0\n"));
	free(a);

	fake_prot_calls = 0;
	a = ask(*state, "rebuild --wait --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "p 4 4 4194304 0 rebuild\n"));
	assert_non_null(strstr(a, "\"running\":false,\"files\":4,\"done\":4"));
	assert_non_null(strstr(a, "\"finished\":true,\"caught_up\":true,"
				  "\"lost\":0}"));
	free(a);

	/*
	 * Files of this node that are lost: both waits end, exit 1, each
	 * named (as ls names it, escaped), once the rest is done.
	 */
	fake_lost = 2;
	fake_prot_calls = 3;
	a = ask(*state, "protect --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "e protect: 2 files of this node are lost: "
				  "no copy, parity row or persisted copy of "
				  "their data is left"));
	assert_non_null(strstr(a, "e protect: lost: /step_100/lost\\n0.pt\n"
				  "e protect: lost: /step_100/lost\\n1.pt\n"));
	free(a);
	fake_prot_calls = 0;
	a = ask(*state, "rebuild --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "p 3 4 3145728 0 rebuild\n"));
	assert_non_null(strstr(a, "e rebuild: lost: /step_100/lost\\n1.pt\n"));
	free(a);
	a = ask(*state, "group\n");
	assert_non_null(strstr(a, "2 files of this node lost (reftfs-admin "
				  "protect names them)"));
	free(a);
	fake_lost = 0;

	/*
	 * A holder refused (no memory there): said once, who and why, and
	 * waited for (it may make room).
	 */
	fake_prot_calls = 0;
	fake_stalled = true;
	a = ask(*state, "protect --wait\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "e protect: waiting: 3 files of this node "
				  "are not protected: node 2 refused the "
				  "copies of 1 of them (No space left on "
				  "device: no memory for them there)"));
	assert_null(strstr(strstr(a, "e protect: waiting") + 1,
			   "e protect: waiting"));
	assert_non_null(strstr(a, "p 3 3 0 0 protect\n"));
	free(a);
	fake_prot_calls = 0;
	a = ask(*state, "metrics\n");
	assert_non_null(strstr(a, "reftfs_protect_stalled_files 1\n"));
	free(a);
	fake_stalled = false;

	/*
	 * Rows here that count a piece a lost node left: said, and waited
	 * for once this node's files are protected.
	 */
	fake_prot_calls = 0;
	fake_stale = true;
	a = ask(*state, "protect\n");
	assert_non_null(strstr(a, "protect: 1 piece that a node lost with "
				  "its memory still counted in parity rows "
				  "here: being taken out"));
	free(a);
	a = ask(*state, "protect --wait\n");
	assert_int_equal(frame_check(a), 0);
	assert_true(fake_prot_calls >= 6);
	free(a);
	fake_stale = false;

	/* A holder of this node's copies is dead: exit 1, and why. */
	fake_prot_calls = 0;
	fake_holder_dead = 2;
	a = ask(*state, "protect --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "e protect: 3 files of this node cannot be "
				  "protected now: node 2, a holder of its "
				  "copies, is dead"));
	free(a);
	fake_holder_dead = -1;

	/* Before it caught up with the log: nothing to say yet. */
	fake_behind = true;
	a = ask(*state, "rebuild\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "rebuild: waiting for this node to catch up"));
	free(a);
	a = ask(*state, "protect --json\n");
	assert_non_null(strstr(a, "\"finished\":false,\"caught_up\":false,"
				  "\"lost\":0,\"stalled\":0,"
				  "\"parity_stale\":0}"));
	free(a);
	fake_behind = false;

	fake_copies = 1;
	a = ask(*state, "protect --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "this node runs --protect none"));
	free(a);
	fake_copies = 2;

	/* xor: the scheme, the parity rows held, the reads decoded. */
	fake_parity = true;
	a = ask(*state, "group\n");
	assert_non_null(strstr(a, "xor:2: 0 files of this node not protected"));
	assert_non_null(strstr(a, "3.0 MiB in 3 rows held for the "
				  "group, 2.0 MiB read by decoding stripes, 0 "
				  "decodes failed"));
	free(a);
	a = ask(*state, "metrics\n");
	assert_non_null(strstr(a, "reftfs_parity_bytes 3145728\n"));
	assert_non_null(strstr(a, "reftfs_parity_rebuilt_pieces_total 2\n"));
	free(a);
	fake_parity = false;
}

static void test_no_group(void **state)
{
	char *a = ask(*state, "group\n");

	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "none (a single node"));
	free(a);
	a = ask(*state, "status\n");
	assert_null(strstr(a, "view epoch"));
	free(a);
	a = ask(*state, "rebuild --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "rebuild: not a node of a group"));
	free(a);
}

static void test_flush(void **state)
{
	char *a = ask(*state, "flush\n");

	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "o flush requested (ticket "));
	assert_null(strstr(a, "\np "));
	free(a);

	a = ask(*state, "flush --wait\n");
	assert_int_equal(frame_check(a), 0);
	assert_true(!strncmp(a, "p 0 3 0 3145728\n", 16));
	assert_non_null(strstr(a, "p 3 3 3145728 3145728\n"
				  "o flush finished: 3 files, 3.0 MiB written "
				  "back\nx 0\n"));
	free(a);

	a = ask(*state, "flush --wait --json\n");
	assert_int_equal(frame_check(a), 0);
	assert_non_null(strstr(a, "\"finished\":true,\"error\":null}\nx 0\n"));
	free(a);
}

static void test_flush_fails(void **state)
{
	char *a;

	fake_flush_error = -EIO;
	a = ask(*state, "flush --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "e flush failed: Input/output error\n"));
	assert_non_null(strstr(a, "e last persist error: cannot write back "
				  "a\\nb"));
	free(a);

	fake_flush_error = 0;
	fake_persist = false;
	a = ask(*state, "flush --wait\n");
	assert_int_equal(frame_check(a), 1);
	assert_non_null(strstr(a, "no persist tier"));
	free(a);
}

static void test_bad_requests(void **state)
{
	static const struct {
		const char *req;
		size_t len;
		int code;
		const char *say;
	} cases[] = {
		{ "frobnicate\n", 0, 2, "e unknown command 'frobnicate'" },
		{ "\n", 0, 2, "e empty request" },
		{ "status --bogus\n", 0, 2, "e status: unknown option" },
		{ "flush /x\n", 0, 2, "e flush: unexpected argument '/x'" },
		{ "ls a b\n", 0, 2, "e ls: unexpected argument 'b'" },
		{ "ls \"a\n", 0, 2, "e malformed request: unterminated" },
		{ "ls \"a\"b\n", 0, 2, "e malformed request: text right" },
		{ "ls \"\\q\"\n", 0, 2, "e malformed request: bad escape" },
		{ "ls \"\\x00\"\n", 0, 2, "e malformed request: bad escape" },
		{ "ls \x01\n", 0, 2, "e malformed request: control" },
		{ "sta\0tus\n", 8, 2, "e malformed request: NUL byte" },
		{ "\xff\xfe\n", 0, 2, "e unknown command '\\xff\\xfe'" },
		{ "version\r\n", 0, 0, "o reftfsd " },
		{ "version", 0, 0, "o reftfsd " }, /* EOF ends the line */
		{ "help\n", 0, 0, "o commands:" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].req);
		int fd = -1;
		char *a;

		if (!strcmp(cases[i].req, "version")) {
			/* Half-close: the server sees EOF after the word. */
			char buf[256];
			ssize_t n, got = 0;

			fd = dial(((struct fx *)*state)->path);
			assert_true(fd >= 0);
			assert_int_equal(send(fd, "version", 7, 0), 7);
			shutdown(fd, SHUT_WR);
			while ((n = recv(fd, buf + got, sizeof(buf) - 1 - got,
					 0)) > 0)
				got += n;
			close(fd);
			buf[got] = '\0';
			a = strdup(buf);
		} else {
			a = ask_n(*state, cases[i].req, len);
		}
		if (frame_check(a) != cases[i].code ||
		    !strstr(a, cases[i].say))
			fail_msg("request %zu: answer %s", i, a);
		free(a);
	}
}

static void test_too_long(void **state)
{
	char req[5000];
	char *a;

	/* 4095 bytes and the newline: the longest request there is. */
	memset(req, 'a', sizeof(req));
	memcpy(req, "ls /", 4);
	req[4095] = '\n';
	a = ask_n(*state, req, 4096);
	assert_int_equal(frame_check(a), 1); /* no such path, but parsed */
	free(a);
	req[4095] = 'a';
	req[4096] = '\n';
	a = ask_n(*state, req, 4097);
	assert_int_equal(frame_check(a), 2);
	assert_non_null(strstr(a, "e request longer than 4095 bytes"));
	free(a);
}

/* Clients that vanish mid-stream or never speak do not hurt the server. */
static void test_vanishing_clients(void **state)
{
	struct fx *fx = *state;
	char *a;
	int fd;

	fake_flush_steps = 1000000; /* a flush that never ends */
	for (int i = 0; i < 40; i++) {
		fd = dial(fx->path);
		assert_true(fd >= 0);
		if (i % 2)
			assert_int_equal(send(fd, "flush --wait\n", 13, 0),
					 13);
		close(fd);
	}
	fake_flush_steps = 3;
	a = ask(fx, "status\n");
	assert_int_equal(frame_check(a), 0);
	free(a);
}

/* rfs_ctl_free() while clients stream progress: they hear why, quickly. */
static void test_free_while_streaming(void **state)
{
	struct fx *fx = *state;
	struct timespec t0, t1;
	int fds[4];
	char buf[65536];

	fake_flush_steps = 1000000;
	for (int i = 0; i < 4; i++) {
		fds[i] = dial(fx->path);
		assert_true(fds[i] >= 0);
		assert_int_equal(send(fds[i], "flush --wait\n", 13, 0), 13);
	}
	usleep(300 * 1000);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rfs_ctl_free(fx->c);
	fx->c = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true((t1.tv_sec - t0.tv_sec) * 1000 +
			    (t1.tv_nsec - t0.tv_nsec) / 1000000 <
		    2000);
	for (int i = 0; i < 4; i++) {
		ssize_t n, got = 0;

		while ((n = recv(fds[i], buf + got, sizeof(buf) - 1 - got,
				 0)) > 0)
			got += n;
		buf[got] = '\0';
		assert_non_null(strstr(buf, "reftfsd is stopping"));
		assert_non_null(strstr(buf, "\nx 1\n"));
		close(fds[i]);
	}
	/* The socket is gone with it. */
	assert_int_equal(access(fx->path, F_OK), -1);
	fake_flush_steps = 3;
}

static void test_live_and_stale(void **state)
{
	struct fx *fx = *state;
	struct rfs_ctl *c2 = NULL;
	char other[96];
	int fd;

	/* A live server owns the path: refused, and its socket stays. */
	assert_int_equal(rfs_ctl_new(&fx->e, fx->path, &c2), -EADDRINUSE);
	assert_null(c2);
	assert_int_equal(access(fx->path, F_OK), 0);
	fd = dial(fx->path);
	assert_true(fd >= 0);
	close(fd);

	/* Not a socket: left alone. */
	snprintf(other, sizeof(other), "%s/run/plain", fx->dir);
	fd = open(other, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(rfs_ctl_new(&fx->e, other, &c2), -EEXIST);
	unlink(other);

	/* A stale socket (nobody listening) is replaced. */
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int s = socket(AF_UNIX, SOCK_STREAM, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", other);
		assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)),
				 0);
		close(s);
	}
	assert_int_equal(rfs_ctl_new(&fx->e, other, &c2), 0);
	assert_int_equal(rfs_ctl_start(c2), 0);
	{
		char *a;
		struct fx fx2 = *fx;

		snprintf(fx2.path, sizeof(fx2.path), "%s", other);
		a = ask(&fx2, "version\n");
		assert_int_equal(frame_check(a), 0);
		free(a);
	}
	rfs_ctl_free(c2);
	assert_int_equal(access(other, F_OK), -1);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000 +
	       (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/*
 * Connections that never send their request line hold no worker and do not
 * stall the acceptor: a real request behind 20 of them is answered at once.
 */
static void test_idle_connections(void **state)
{
	struct fx *fx = *state;
	struct timespec t0;
	int idle[20];
	long ms;
	char *a;

	for (int i = 0; i < 20; i++) {
		idle[i] = dial(fx->path);
		assert_true(idle[i] >= 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	a = ask(fx, "version\n");
	ms = ms_since(&t0);
	if (frame_check(a) != 0 || ms > 1000)
		fail_msg("behind 20 idle connections: %ld ms, answer %s", ms,
			 a);
	free(a);
	for (int i = 0; i < 20; i++)
		close(idle[i]);
}

/* Read what the server sent on @fd until it closes; NUL-terminated. */
static void slurp(int fd, char *buf, size_t size)
{
	size_t got = 0;
	ssize_t n;

	while (got + 1 < size &&
	       (n = recv(fd, buf + got, size - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
}

/*
 * More idle connections than the server keeps: the oldest are closed with
 * a reason, the newest stay, and a real request is still answered at once.
 */
static void test_many_idle_connections(void **state)
{
	struct fx *fx = *state;
	struct timespec t0;
	int idle[80];
	char buf[256];
	long ms;
	char *a;

	for (int i = 0; i < 80; i++) {
		idle[i] = dial(fx->path);
		assert_true(idle[i] >= 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	a = ask(fx, "version\n");
	ms = ms_since(&t0);
	if (frame_check(a) != 0 || ms > 1000)
		fail_msg("behind 80 idle connections: %ld ms, answer %s", ms,
			 a);
	free(a);
	/* 80 + 1 connections, 64 kept: the first 17 went, oldest first. */
	for (int i = 0; i < 17; i++) {
		slurp(idle[i], buf, sizeof(buf));
		if (!strstr(buf, "e no request line, and 63 other connections "
				 "wait for theirs: closed\nx 2\n"))
			fail_msg("idle connection %d: answer '%s'", i, buf);
	}
	for (int i = 17; i < 80; i++) {
		ssize_t n = recv(idle[i], buf, sizeof(buf), MSG_DONTWAIT);

		if (n != -1 || errno != EAGAIN)
			fail_msg("idle connection %d was closed (%zd)", i, n);
	}
	for (int i = 0; i < 80; i++)
		close(idle[i]);
}

/*
 * Every worker busy (16 clients in flush --wait): a request waits for
 * one; one that frees up in time serves it, else after 2 s it is told.
 */
static void test_busy_workers(void **state)
{
	struct fx *fx = *state;
	struct timespec t0;
	int fds[RFS_CTL_MAX_CLIENTS];
	char buf[256];
	long ms;
	char *a;

	fake_flush_steps = 1000000;
	for (int i = 0; i < RFS_CTL_MAX_CLIENTS; i++) {
		fds[i] = dial(fx->path);
		assert_true(fds[i] >= 0);
		assert_int_equal(send(fds[i], "flush --wait\n", 13, 0), 13);
		/* Its first progress record: a worker has it. */
		assert_true(recv(fds[i], buf, 2, MSG_WAITALL) == 2);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	a = ask(fx, "version\n");
	ms = ms_since(&t0);
	if (frame_check(a) != 1 ||
	    !strstr(a, "e reftfsd is serving too many control clients") ||
	    ms < 1900 || ms > 5000)
		fail_msg("all workers busy: %ld ms, answer %s", ms, a);
	free(a);

	/* A client that leaves frees its worker for the next request. */
	close(fds[0]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	a = ask(fx, "version\n");
	ms = ms_since(&t0);
	if (frame_check(a) != 0 || ms > 1500)
		fail_msg("after one client left: %ld ms, answer %s", ms, a);
	free(a);
	for (int i = 1; i < RFS_CTL_MAX_CLIENTS; i++)
		close(fds[i]);
	fake_flush_steps = 3;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_socket_mode, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_status_text, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_status_json, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_status_error_shown,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_ls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_checkpoints, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_wait, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ls_missing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group, setup_group,
						teardown),
		cmocka_unit_test_setup_teardown(test_group_log_waiting,
						setup_group, teardown),
		cmocka_unit_test_setup_teardown(test_group_log_registry_waiting,
						setup_group, teardown),
		cmocka_unit_test_setup_teardown(test_group_force_remove,
						setup_group, teardown),
		cmocka_unit_test_setup_teardown(test_group_taken_over,
						setup_group, teardown),
		cmocka_unit_test_setup_teardown(test_protect_rebuild,
						setup_group, teardown),
		cmocka_unit_test_setup_teardown(test_no_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_requests, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_too_long, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_vanishing_clients, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_free_while_streaming,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_and_stale, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_idle_connections, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_many_idle_connections,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy_workers, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
