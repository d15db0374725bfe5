/*
 * test_nslog.c - the namespace log on libraft, 3 and 5 nodes in one
 * process: real raft_uv disk logs (tmpfs when there is one), real TCP
 * raft links on loopback ports with our handshake, and the fake peer
 * transport for forwarding and joins.
 *
 * The state machine of every node is an append-only list of entries; each
 * apply returns the list's new length, so "same results" and "same order"
 * are one check: an acknowledged entry sits at position result - 1 on
 * every node, exactly once.  A table shared by all nodes records which
 * entry each index applied and flags any node that applies another one
 * there.  NSLOG_SEED=n replays the randomized schedule; NSLOG_TEST=glob
 * runs the tests whose names match.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "erasure.h"
#include "group_test.h"

#define MAXN 5
#define ELECTION_MS 300
#define HEARTBEAT_MS 50
#define SUBMIT_MS 8000
#define ENTRY_MAGIC 0x4e544553u /* "SETN" */

/*
 * Under TSan: libuv and libraft are not instrumented, and libuv closes
 * descriptors with a raw close syscall TSan does not see, so a number it
 * closed and another thread reused looks like a race on the descriptor
 * (libuv's epoll loop even EPOLL_CTL_DELs such a stale number).  Calls made
 * from uninstrumented code are not checked for races; ours still are.
 */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "ignore_noninstrumented_modules=1";
}

/* --- the state machine ---------------------------------------------------- */

struct rec {
	uint64_t index;
	uint64_t id;		/* the entry's unique id */
};

struct tfsm {
	pthread_mutex_t lock;
	struct world *w;
	int node;
	struct rec *recs;
	size_t n, cap;
	int restores;
	int applies;
	int bad;		/* malformed entries seen */
};

/* Which entry each index applied (shared by every node). */
struct world {
	int n;
	struct peer_fakenet *net;
	char base[512];
	char addr_buf[MAXN][64];
	const char *addrs[MAXN];
	bool unknown[MAXN][MAXN]; /* [i][j]: i starts without j's address */
	bool tcp;			/* peer_tcp instead of the fake */
	char peer_buf[MAXN][64];
	const char *peer_addrs[MAXN];
	struct grp_secret secret, wrong;
	uint64_t next_inc;
	uint64_t next_id;
	unsigned snapshot_every;
	int election_ms, heartbeat_ms;	/* 0: ELECTION_MS, HEARTBEAT_MS */
	pthread_mutex_t lock;
	uint64_t *at;		/* at[index]: entry id, 0 unknown */
	size_t at_len;
	int divergences;
	struct tnode {
		bool up;
		struct peer_xport *x;
		struct nslog *l;
		struct tfsm *f;
		char dir[600];
	} node[MAXN];
};

/* The world of the running test, freed by teardown() if the test fails. */
static struct world *cur_world;

static void record_at(struct world *w, uint64_t index, uint64_t id)
{
	pthread_mutex_lock(&w->lock);
	if (index >= w->at_len) {
		size_t len = w->at_len ? w->at_len : 256;
		uint64_t *at;

		while (len <= index)
			len *= 2;
		at = realloc(w->at, len * sizeof(*at));
		assert_non_null(at);
		memset(at + w->at_len, 0, (len - w->at_len) * sizeof(*at));
		w->at = at;
		w->at_len = len;
	}
	if (w->at[index] && w->at[index] != id) {
		w->divergences++;
		fprintf(stderr, "index %" PRIu64 ": entry %" PRIu64
			" and entry %" PRIu64 "\n",
			index, w->at[index], id);
	}
	w->at[index] = id;
	pthread_mutex_unlock(&w->lock);
}

static int f_apply(void *ctx, uint64_t index, const void *buf, size_t len)
{
	struct tfsm *f = ctx;
	const uint8_t *p = buf;
	uint32_t magic = 0;
	uint64_t id;
	int n;

	if (len == 16)
		memcpy(&magic, p, 4);
	if (len != 16 || magic != ENTRY_MAGIC) {
		pthread_mutex_lock(&f->lock);
		f->bad++;
		pthread_mutex_unlock(&f->lock);
		return -EINVAL;
	}
	memcpy(&id, p + 8, 8);
	record_at(f->w, index, id);
	pthread_mutex_lock(&f->lock);
	if (f->n == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 64;
		f->recs = realloc(f->recs, f->cap * sizeof(*f->recs));
		assert_non_null(f->recs);
	}
	f->recs[f->n].index = index;
	f->recs[f->n].id = id;
	n = (int)++f->n;
	f->applies++;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static int f_snapshot(void *ctx, void **buf, size_t *len)
{
	struct tfsm *f = ctx;

	pthread_mutex_lock(&f->lock);
	*len = f->n * sizeof(struct rec);
	*buf = malloc(*len ? *len : 1);
	if (*len)
		memcpy(*buf, f->recs, *len);
	pthread_mutex_unlock(&f->lock);
	return *buf ? 0 : -ENOMEM;
}

static int f_restore(void *ctx, uint64_t index, const void *buf,
		     size_t len)
{
	(void)index;
	struct tfsm *f = ctx;

	if (len % sizeof(struct rec))
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	f->n = len / sizeof(struct rec);
	if (f->cap < f->n) {
		f->cap = f->n;
		f->recs = realloc(f->recs, f->cap * sizeof(*f->recs));
		assert_non_null(f->recs);
	}
	if (len)
		memcpy(f->recs, buf, len);
	f->restores++;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/* --- the world ------------------------------------------------------------ */

enum f_field { F_N, F_RESTORES, F_APPLIES, F_BAD };

/* A counter of node @i's state machine, read under its lock. */
static int fsm_get(struct world *w, int i, enum f_field which)
{
	struct tfsm *f = w->node[i].f;
	int v;

	pthread_mutex_lock(&f->lock);
	v = which == F_N ? (int)f->n :
	    which == F_RESTORES ? f->restores :
	    which == F_APPLIES ? f->applies : f->bad;
	pthread_mutex_unlock(&f->lock);
	return v;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * A loopback port nobody listens on now, below the kernel's ephemeral range
 * (ip_local_port_range): a node restarted later on the same port must not
 * find it taken by some connection's local end meanwhile.  Drawn at random
 * (seeded by getrandom: two test programs started in the same millisecond
 * once drew the same ports from a pid ^ time seed) and never handed out
 * twice in this process (the check binds and closes: a port handed out but
 * not yet listened on looks free).
 */
static int free_port(void)
{
	static unsigned seed;
	static int given[256];
	static int ngiven;
	int lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	if (!seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (unsigned)getpid() * 2654435761u ^ (unsigned)now_ms();
	for (int tries = 0; tries < 1000; tries++) {
		struct sockaddr_in a = { .sin_family = AF_INET };
		int fd = socket(AF_INET, SOCK_STREAM, 0), port, rc;
		bool dup = false;

		assert_true(fd >= 0);
		/* 10000 .. lo - 1; above the range when it starts low. */
		if (lo > 11000)
			port = 10000 + (int)(rand_r(&seed) %
					     (unsigned)(lo - 10000));
		else
			port = hi + 1 + (int)(rand_r(&seed) %
					      (unsigned)(65000 - hi));
		for (int k = 0; k < ngiven && k < 256 && !dup; k++)
			dup = given[k] == port;
		if (dup) {
			close(fd);
			continue;
		}
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = htons((uint16_t)port);
		rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
		if (rc == 0) {
			given[ngiven++ % 256] = port;
			return port;
		}
	}
	fail_msg("no free loopback port below %d", lo);
	return -1;
}

/* tmpfs when there is one: raft_uv syncs every append. */
static void make_base(struct world *w)
{
	const char *tmp = getenv("TMPDIR");
	struct statfs sf;

	if (statfs("/dev/shm", &sf) == 0 && access("/dev/shm", W_OK) == 0)
		tmp = "/dev/shm";
	else if (!tmp)
		tmp = "/tmp";
	snprintf(w->base, sizeof(w->base), "%s/test_nslog.XXXXXX", tmp);
	assert_non_null(mkdtemp(w->base));
}

static void rm_rf(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	char sub[1024];

	if (!d) {
		unlink(path);
		return;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		rm_rf(sub);
	}
	closedir(d);
	rmdir(path);
}

/* Remove every file of @dir but nslog.state. */
static void remove_raft_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char sub[1024];

	assert_non_null(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, "nslog.state"))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
		rm_rf(sub);
	}
	closedir(d);
}

static struct world *world_new(int n, uint64_t seed, unsigned snapshot_every)
{
	struct world *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->n = n;
	w->snapshot_every = snapshot_every;
	w->net = peer_fakenet_new(n, seed);
	assert_non_null(w->net);
	peer_fakenet_delay(w->net, 0, 2);
	make_base(w);
	pthread_mutex_init(&w->lock, NULL);
	w->secret.len = 32;
	memset(w->secret.key, 'k', 32);
	w->wrong.len = 32;
	memset(w->wrong.key, 'w', 32);
	for (int i = 0; i < n; i++) {
		snprintf(w->addr_buf[i], sizeof(w->addr_buf[i]),
			 "127.0.0.1:%d", free_port());
		w->addrs[i] = w->addr_buf[i];
		snprintf(w->peer_buf[i], sizeof(w->peer_buf[i]),
			 "127.0.0.1:%d", free_port());
		w->peer_addrs[i] = w->peer_buf[i];
		snprintf(w->node[i].dir, sizeof(w->node[i].dir), "%s/n%d",
			 w->base, i);
	}
	cur_world = w;
	return w;
}

static void free_fsm(struct tfsm *f)
{
	if (!f)
		return;
	pthread_mutex_destroy(&f->lock);
	free(f->recs);
	free(f);
}

/*
 * Start node @i: a new daemon (new incarnation, empty memory).  nslog's
 * start result; on failure nothing of the node is left running.
 */
static int try_start_node(struct world *w, int i,
			  const struct grp_secret *secret)
{
	struct tnode *t = &w->node[i];
	struct tfsm *f = calloc(1, sizeof(*f));
	struct nslog_fsm fsm = {
		.ctx = f,
		.apply = f_apply,
		.snapshot = f_snapshot,
		.restore = f_restore,
	};
	const char *addrs[MAXN];
	struct nslog_opts o = {
		.self = i,
		.nodes = w->n,
		.incarnation = ++w->next_inc,
		.addrs = addrs,
		.dir = t->dir,
		.secret = secret,
		.group = "g0",
		.election_ms = w->election_ms ? w->election_ms : ELECTION_MS,
		.heartbeat_ms = w->heartbeat_ms ? w->heartbeat_ms :
						  HEARTBEAT_MS,
		.snapshot_every = w->snapshot_every,
	};
	int rc;

	assert_false(t->up);
	assert_non_null(f);
	for (int j = 0; j < w->n; j++)
		addrs[j] = w->unknown[i][j] ? NULL : w->addrs[j];
	pthread_mutex_init(&f->lock, NULL);
	f->w = w;
	f->node = i;
	if (w->tcp) {
		struct peer_tcp_opts to = {
			.self = i,
			.nodes = w->n,
			.incarnation = o.incarnation,
			.group = "g0",
			.addrs = w->peer_addrs,
			.secret = secret,
			.handshake_ms = 2000,
			.idle_ms = 2000,
		};

		assert_int_equal(peer_tcp_new(&to, &t->x), 0);
	} else {
		assert_int_equal(peer_fake_new(w->net, i, o.incarnation,
					       &t->x), 0);
	}
	o.x = t->x;
	assert_int_equal(nslog_new(&o, &fsm, &t->l), 0);
	assert_int_equal(peer_start(t->x), 0);
	rc = nslog_start(t->l);
	if (rc < 0) {
		nslog_stop(t->l);
		peer_free(t->x);
		nslog_free(t->l);
		free_fsm(f);
		t->l = NULL;
		t->x = NULL;
		return rc;
	}
	t->f = f;
	t->up = true;
	return 0;
}

static void start_node_with(struct world *w, int i,
			    const struct grp_secret *secret)
{
	assert_int_equal(try_start_node(w, i, secret), 0);
}

static void start_node(struct world *w, int i)
{
	start_node_with(w, i, &w->secret);
}

/* Kill node @i's daemon: its memory is gone, its disk stays. */
static void kill_node(struct world *w, int i)
{
	struct tnode *t = &w->node[i];

	assert_true(t->up);
	nslog_stop(t->l);
	peer_free(t->x);
	nslog_free(t->l);
	free_fsm(t->f);
	t->f = NULL;
	t->l = NULL;
	t->x = NULL;
	t->up = false;
}

static void world_free(struct world *w)
{
	for (int i = 0; i < w->n; i++)
		if (w->node[i].up)
			kill_node(w, i);
	peer_fakenet_free(w->net);
	rm_rf(w->base);
	free(w->at);
	pthread_mutex_destroy(&w->lock);
	free(w);
	cur_world = NULL;
}

static struct nslog_status status(struct world *w, int i)
{
	struct nslog_status s;

	nslog_get_status(w->node[i].l, &s);
	return s;
}

/*
 * Wait until every up node (in @mask, all when 0) names the same leader,
 * which is up and says it leads.  Its id, or -1 after @ms.
 */
static int wait_leader_in(struct world *w, unsigned mask, int ms)
{
	uint64_t until = now_ms() + (uint64_t)ms;

	if (!mask)
		mask = ~0u;
	do {
		int leader = -2;
		bool ok = true;

		for (int i = 0; i < w->n && ok; i++) {
			struct nslog_status s;

			if (!w->node[i].up || !(mask & (1u << i)))
				continue;
			s = status(w, i);
			if (leader == -2)
				leader = s.leader;
			ok = s.leader >= 0 && s.leader == leader;
		}
		if (ok && leader >= 0 && w->node[leader].up &&
		    (mask & (1u << leader)) && status(w, leader).is_leader)
			return leader;
		sleep_ms(20);
	} while (now_ms() < until);
	return -1;
}

static int wait_leader(struct world *w, int ms)
{
	return wait_leader_in(w, 0, ms);
}

static void make_entry(struct world *w, uint8_t buf[16], uint64_t *id)
{
	uint32_t magic = ENTRY_MAGIC, zero = 0;

	pthread_mutex_lock(&w->lock);
	*id = ++w->next_id;
	pthread_mutex_unlock(&w->lock);
	memcpy(buf, &magic, 4);
	memcpy(buf + 4, &zero, 4);
	memcpy(buf + 8, id, 8);
}

/* Submit a new entry from node @i: rc; its id and apply's result. */
static int submit(struct world *w, int i, int ms, uint64_t *id, int *result)
{
	uint8_t buf[16];

	make_entry(w, buf, id);
	return nslog_submit(w->node[i].l, buf, sizeof(buf), ms, result);
}

/* Node @i's list of entry ids, copied. */
static size_t snapshot_ids(struct world *w, int i, uint64_t **ids)
{
	struct tfsm *f = w->node[i].f;
	size_t n;

	pthread_mutex_lock(&f->lock);
	n = f->n;
	*ids = malloc((n ? n : 1) * sizeof(**ids));
	assert_non_null(*ids);
	for (size_t k = 0; k < n; k++)
		(*ids)[k] = f->recs[k].id;
	pthread_mutex_unlock(&f->lock);
	return n;
}

/*
 * Wait until every up node holds the same list of at least @min entries.
 * Fails the test after @ms.
 */
static size_t wait_converged(struct world *w, size_t min, int ms)
{
	uint64_t until = now_ms() + (uint64_t)ms;
	size_t n0 = 0;

	for (;;) {
		uint64_t *ref = NULL;
		bool same = true;

		n0 = 0;
		for (int i = 0; i < w->n && same; i++) {
			uint64_t *ids;
			size_t n;

			if (!w->node[i].up)
				continue;
			n = snapshot_ids(w, i, &ids);
			if (!ref) {
				ref = ids;
				n0 = n;
				same = n >= min;
				continue;
			}
			same = n == n0 && !memcmp(ids, ref, n * sizeof(*ids));
			free(ids);
		}
		free(ref);
		if (same)
			return n0;
		if (now_ms() > until) {
			for (int i = 0; i < w->n; i++) {
				struct nslog_status s;

				if (!w->node[i].up)
					continue;
				s = status(w, i);
				fprintf(stderr,
					"node %d: %zu entries, applied %" PRIu64
					" commit %" PRIu64 " last %" PRIu64
					" term %" PRIu64 " leader %d voters %d "
					"id %" PRIu64 "\n",
					i, (size_t)fsm_get(w, i, F_N),
					s.applied_index,
					s.commit_index, s.last_index, s.term,
					s.leader, s.voters, s.raft_id);
			}
			fail_msg("nodes did not converge in %d ms", ms);
		}
		sleep_ms(20);
	}
}

/* Entry @id acknowledged with @result sits at result - 1 on node @i. */
static void assert_acked(struct world *w, int i, uint64_t id, int result)
{
	struct tfsm *f = w->node[i].f;
	size_t count = 0;

	pthread_mutex_lock(&f->lock);
	assert_true(result >= 1 && (size_t)result <= f->n);
	assert_int_equal(f->recs[result - 1].id, id);
	for (size_t k = 0; k < f->n; k++)
		count += f->recs[k].id == id;
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(count, 1);
}

static void assert_no_divergence(struct world *w)
{
	for (int i = 0; i < w->n; i++)
		if (w->node[i].up)
			assert_int_equal(fsm_get(w, i, F_BAD), 0);
	pthread_mutex_lock(&w->lock);
	assert_int_equal(w->divergences, 0);
	pthread_mutex_unlock(&w->lock);
}

struct acked {
	uint64_t id;
	int result;
};

static void start_all(struct world *w)
{
	for (int i = 0; i < w->n; i++)
		start_node(w, i);
	assert_true(wait_leader(w, 10000) >= 0);
}

/* --- tests ---------------------------------------------------------------- */

struct burst {
	struct world *w;
	int node;
	int count;
	struct acked acked[64];
	int failures;
};

static void *burst_main(void *arg)
{
	struct burst *b = arg;

	for (int k = 0; k < b->count; k++)
		if (submit(b->w, b->node, SUBMIT_MS, &b->acked[k].id,
			   &b->acked[k].result) != 0)
			b->failures++;
	return NULL;
}

/*
 * @count submits from every up node at once (node @skip excepted); all
 * must succeed.  Appends them to @a (*na).
 */
static void burst_all(struct world *w, int count, int skip, struct acked *a,
		      int *na)
{
	struct burst b[MAXN];
	pthread_t th[MAXN];

	for (int i = 0; i < w->n; i++) {
		b[i] = (struct burst){ .w = w, .node = i, .count = count };
		if (w->node[i].up && i != skip)
			assert_int_equal(pthread_create(&th[i], NULL,
							burst_main, &b[i]), 0);
	}
	for (int i = 0; i < w->n; i++) {
		if (!w->node[i].up || i == skip)
			continue;
		pthread_join(th[i], NULL);
		assert_int_equal(b[i].failures, 0);
		for (int k = 0; k < count; k++)
			a[(*na)++] = b[i].acked[k];
	}
}

/*
 * Three nodes: every node submits, at once (followers forward); every
 * entry lands once, at the same position with the same result everywhere.
 */
static void test_submit_everywhere(void **state)
{
	struct world *w = world_new(3, 1, 0);
	struct burst b[3];
	pthread_t th[3];
	size_t n;

	(void)state;
	/* A first start waits for every node: two of three found nothing. */
	start_node(w, 0);
	start_node(w, 1);
	sleep_ms(ELECTION_MS);
	for (int i = 0; i < 2; i++) {
		uint64_t id;
		int result;

		assert_int_equal(status(w, i).raft_id, 0);
		assert_int_equal(submit(w, i, 100, &id, &result), -ENOTCONN);
	}
	start_node(w, 2);
	assert_true(wait_leader(w, 10000) >= 0);
	for (int i = 0; i < 3; i++) {
		b[i] = (struct burst){ .w = w, .node = i, .count = 20 };
		assert_int_equal(pthread_create(&th[i], NULL, burst_main,
						&b[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	n = wait_converged(w, 60, 10000);
	assert_int_equal(n, 60);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(b[i].failures, 0);
		for (int k = 0; k < b[i].count; k++)
			for (int j = 0; j < 3; j++)
				assert_acked(w, j, b[i].acked[k].id,
					     b[i].acked[k].result);
	}
	for (int i = 0; i < 3; i++) {
		struct nslog_status s = status(w, i);

		assert_int_equal(s.voters, 3);
		assert_true(s.self_voter);
		assert_int_equal(s.raft_id, (uint64_t)i + 1);
		assert_int_equal(s.auth_failed, 0);
		assert_int_equal(nslog_barrier(w->node[i].l, 5000), 0);
	}
	assert_no_divergence(w);
	world_free(w);
}

/*
 * Five nodes: the leader dies, another takes over, submits go on; the
 * dead node comes back with its disk and catches up.
 */
static void test_leader_killed_and_back(void **state)
{
	struct world *w = world_new(5, 2, 0);
	struct acked a[64];
	int leader, next, na = 0;

	(void)state;
	start_all(w);
	burst_all(w, 2, -1, a, &na);
	leader = wait_leader(w, 5000);
	assert_true(leader >= 0);
	kill_node(w, leader);
	next = wait_leader(w, 10000);
	assert_true(next >= 0 && next != leader);
	burst_all(w, 2, -1, a, &na);
	start_node(w, leader); /* same disk */
	burst_all(w, 2, -1, a, &na);
	assert_int_equal(na, 28);
	assert_int_equal(wait_converged(w, 28, 10000), 28);
	for (int i = 0; i < 5; i++) {
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
		assert_int_equal(status(w, i).raft_id, (uint64_t)i + 1);
	}
	assert_no_divergence(w);
	world_free(w);
}

/*
 * Peer links that break at random (frames lost, links reset): forwarded
 * proposals are retried, and a retry whose first copy had committed
 * appends the same entry twice.  Each applies once.
 */
static void test_retries_apply_once(void **state)
{
	struct world *w = world_new(3, 7, 0);
	struct acked a[64];
	int na = 0, leader;

	(void)state;
	start_all(w);
	leader = wait_leader(w, 5000);
	peer_fakenet_drop(w->net, 0.3);
	burst_all(w, 12, leader, a, &na);
	peer_fakenet_drop(w->net, 0);
	assert_int_equal(na, 24);
	assert_int_equal(wait_converged(w, 24, 10000), 24);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	assert_no_divergence(w);
	world_free(w);
}

/* Every up node: @n voters, itself one of them. */
static void wait_voters(struct world *w, int n, int ms)
{
	uint64_t until = now_ms() + (uint64_t)ms;

	for (;;) {
		bool ok = true;

		for (int i = 0; i < w->n && ok; i++) {
			struct nslog_status s;

			if (!w->node[i].up)
				continue;
			s = status(w, i);
			ok = s.voters == n && s.self_voter;
		}
		if (ok)
			return;
		if (now_ms() > until) {
			for (int i = 0; i < w->n; i++) {
				struct nslog_status s;

				if (!w->node[i].up)
					continue;
				s = status(w, i);
				fprintf(stderr,
					"node %d: voters %d%s, id %" PRIu64
					", leader %d, term %" PRIu64
					", commit %" PRIu64 "\n",
					i, s.voters,
					s.self_voter ? " (one)" : "",
					s.raft_id, s.leader, s.term,
					s.commit_index);
			}
			fail_msg("configuration did not settle on %d voters",
				 n);
		}
		sleep_ms(20);
	}
}

/*
 * A node restarted on an empty disk is a replacement: it gets a new raft
 * id, installs a snapshot, then takes entries; its old id leaves.
 */
static void test_replacement(void **state)
{
	struct world *w = world_new(3, 3, 8);
	struct acked a[64];
	int na = 0, victim;

	(void)state;
	start_all(w);
	burst_all(w, 8, -1, a, &na);
	victim = wait_leader(w, 5000); /* the hardest: the leader */
	assert_true(victim >= 0);
	kill_node(w, victim);
	/* Raft's files lost, nslog.state kept: refused, votes forgotten. */
	remove_raft_files(w->node[victim].dir);
	assert_int_equal(try_start_node(w, victim, &w->secret), -EINVAL);
	rm_rf(w->node[victim].dir);
	start_node(w, victim);
	/* It must not bootstrap a log of its own: entries go on meanwhile. */
	burst_all(w, 3, victim, a, &na);
	wait_voters(w, 3, 15000);
	assert_int_equal(status(w, victim).raft_id,
			 (uint64_t)victim + 1 + GRP_MAX_NODES);
	burst_all(w, 3, -1, a, &na);
	assert_int_equal(na, 39);
	assert_int_equal(wait_converged(w, 39, 10000), 39);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	/* Caught up by a snapshot (the log was compacted), then entries. */
	assert_true(fsm_get(w, victim, F_RESTORES) >= 1);
	assert_true(fsm_get(w, victim, F_APPLIES) >= 1);
	wait_voters(w, 3, 5000);
	assert_no_divergence(w);

	/* The replacement restarts on its own disk: same new id. */
	kill_node(w, victim);
	start_node(w, victim);
	assert_int_equal(submit(w, victim, SUBMIT_MS, &a[0].id, &a[0].result),
			 0);
	assert_int_equal(wait_converged(w, 40, 10000), 40);
	assert_int_equal(status(w, victim).raft_id,
			 (uint64_t)victim + 1 + GRP_MAX_NODES);
	assert_no_divergence(w);
	world_free(w);
}

/*
 * Five nodes, three lost for good: no majority, no change commits.
 * force-remove is refused while a voter is neither named nor up and while
 * a named node is up; on a survivor it runs on the one whose log is
 * furthest along (the other names it).  Then the log goes on: the other
 * survivor joins again under a new raft id, keeping its state machine; no
 * entry is applied twice or differently anywhere, and the chosen one
 * restores no snapshot (what it holds is skipped); a lost node back on its
 * old disk never joins; a replacement on an empty disk does.
 */
static void test_force_remove(void **state)
{
	struct world *w = world_new(5, 7, 8);
	bool up[MAXN] = { true, true }, up1[MAXN] = { true };
	int gone[3] = { 2, 3, 4 }, gone1[3] = { 1, 3, 4 };
	int na = 0, rc, chosen, other, restores[2], result;
	struct acked a[128];
	size_t n;
	char msg[512];
	uint64_t id;

	(void)state;
	start_all(w);
	burst_all(w, 6, -1, a, &na);
	assert_int_equal(wait_converged(w, 30, 10000), 30);
	for (int i = 2; i < 5; i++)
		kill_node(w, i);
	assert_int_not_equal(submit(w, 0, 1000, &id, &result), 0);
	/* A leader among the survivors steps down once it sees no majority. */
	for (int k = 0; k < 200 && (status(w, 0).leader >= 0 ||
				    status(w, 1).leader >= 0); k++)
		sleep_ms(20);

	rc = nslog_force_remove(w->node[0].l, gone, 3, up1, msg, sizeof(msg));
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(msg, "node 1 has a vote and is neither named"));
	rc = nslog_force_remove(w->node[0].l, gone1, 3, up, msg, sizeof(msg));
	assert_int_equal(rc, -EBUSY);
	assert_non_null(strstr(msg, "node 1 is up"));
	restores[0] = fsm_get(w, 0, F_RESTORES);
	restores[1] = fsm_get(w, 1, F_RESTORES);
	rc = nslog_force_remove(w->node[0].l, gone, 3, up, msg, sizeof(msg));
	chosen = 0;
	if (rc == -EAGAIN) {
		assert_non_null(strstr(msg, "run force-remove on node 1"));
		chosen = 1;
		rc = nslog_force_remove(w->node[1].l, gone, 3, up, msg,
					sizeof(msg));
	}
	assert_int_equal(rc, 0);
	other = 1 - chosen;
	assert_non_null(strstr(msg, "joins it again"));
	wait_voters(w, 2, 15000);
	assert_int_equal(status(w, other).raft_id,
			 (uint64_t)other + 1 + GRP_MAX_NODES);
	burst_all(w, 4, -1, a, &na);
	/*
	 * The submit that timed out without a majority may sit uncommitted
	 * in the chosen log: the forced configuration commits it.
	 */
	n = wait_converged(w, 38, 10000);
	assert_true(n == 38 || n == 39);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	/*
	 * The chosen one's raft restarted from a snapshot below what it
	 * held: not restored (the other one may be sent a later one).
	 */
	assert_int_equal(fsm_get(w, chosen, F_RESTORES), restores[chosen]);
	assert_no_divergence(w);

	/* Node 2 on its old disk: its old id is refused, it never votes. */
	start_node(w, 2);
	assert_int_not_equal(submit(w, 2, 1500, &id, &result), 0);
	assert_false(status(w, 2).leader >= 0 &&
		     status(w, 2).leader != chosen);
	assert_int_equal(status(w, chosen).voters, 2);
	kill_node(w, 2);
	/* On an empty disk it is a replacement, and joins. */
	rm_rf(w->node[2].dir);
	start_node(w, 2);
	wait_voters(w, 3, 15000);
	burst_all(w, 2, -1, a, &na);
	assert_int_equal(wait_converged(w, n + 6, 10000), n + 6);
	assert_no_divergence(w);
	world_free(w);
}

/* Cut nodes in @side 0 from those in @side 1: raft links and peer links. */
static void partition(struct world *w, const int *side, bool cut)
{
	for (int i = 0; i < w->n; i++)
		for (int j = 0; j < w->n; j++)
			if (side[i] != side[j] && w->node[i].up)
				nslog_test_cut(w->node[i].l, j, cut);
	if (cut)
		peer_fakenet_partition(w->net, side);
	else
		peer_fakenet_heal(w->net);
}

/*
 * Five nodes, the leader and one more cut off: the minority cannot
 * commit (its submits fail), the majority elects a leader and goes on;
 * after the heal the minority catches up.
 */
static void test_minority_partition(void **state)
{
	struct world *w = world_new(5, 4, 0);
	int side[MAXN] = { 0 };
	struct acked a[64];
	int leader, other, maj, rc, result, na = 0;
	unsigned mask = 0;
	uint64_t id, t0;

	(void)state;
	start_all(w);
	burst_all(w, 1, -1, a, &na);
	leader = wait_leader(w, 5000);
	assert_true(leader >= 0);
	other = (leader + 1) % 5;
	side[leader] = side[other] = 1;
	for (int i = 0; i < 5; i++)
		if (!side[i])
			mask |= 1u << i;
	partition(w, side, true);
	maj = wait_leader_in(w, mask, 10000);
	assert_true(maj >= 0 && !side[maj]);
	for (int k = 0; k < 3; k++) {
		int from = (maj + k) % 5;

		if (side[from])
			from = maj;
		assert_int_equal(submit(w, from, SUBMIT_MS, &a[na].id,
					&a[na].result), 0);
		na++;
	}
	/* The old leader and the other minority node: nothing commits. */
	t0 = now_ms();
	rc = submit(w, leader, 600, &id, &result);
	assert_true(rc == -ETIMEDOUT || rc == -ENOTCONN);
	assert_true(now_ms() - t0 >= 500);
	assert_int_not_equal(nslog_barrier(w->node[other].l, 200), 0);
	assert_false(status(w, leader).is_leader);
	partition(w, side, false);
	burst_all(w, 1, -1, a, &na);
	assert_int_equal(na, 13);
	/* The minority's failed entries never applied anywhere. */
	assert_int_equal(wait_converged(w, 13, 10000), 13);
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	assert_no_divergence(w);
	world_free(w);
}

/* Connect to @addr's port; the fd. */
static int raw_connect(const char *addr)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* True when the peer closes @fd within @ms (EOF or reset). */
static bool closed_within(int fd, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	char c[256];
	uint64_t until = now_ms() + (uint64_t)ms;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (now_ms() < until) {
		ssize_t n = read(fd, c, sizeof(c));

		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
	return false;
}

/*
 * A raft link's HELLO frame as docs/protocol.md ("Handshake") lays it
 * out, written from the document: from node @cn (raft id @cid) to node
 * @sn (raft id @sid), group @g (2 bytes).  Its length.
 */
static size_t doc_hello(uint8_t *out, int cn, uint64_t cid, int sn,
			uint64_t sid, const char *g)
{
	uint8_t m[64 + 2];
	struct wire_hdr h = { .version = WIRE_VERSION, .type = 1, .seq = 1,
			      .meta_len = sizeof(m) };

	memset(m, 0, sizeof(m));
	memcpy(m, "RFTH", 4);
	m[4] = 2;	/* version */
	m[6] = 2;	/* a raft link */
	m[7] = 2;	/* group length */
	m[8] = (uint8_t)cn;
	m[12] = (uint8_t)sn;
	for (int i = 0; i < 8; i++) {
		m[16 + i] = (uint8_t)(cid >> (8 * i));
		m[24 + i] = (uint8_t)(sid >> (8 * i));
	}
	getrandom(m + 32, 32, 0);
	memcpy(m + 64, g, 2);
	h.meta_crc = ers_crc32c(0, m, sizeof(m));
	wire_hdr_encode(&h, out);
	memcpy(out + WIRE_HDR_LEN, m, sizeof(m));
	return WIRE_HDR_LEN + sizeof(m);
}

/*
 * The raft port of a follower against garbage, a wrong group, a HELLO for
 * another raft id, a wrong MAC and a silent client: each closed and
 * counted, and the group goes on (one entry committed).
 */
static void bad_input(struct world *w, struct acked *a)
{
	uint8_t hello[WIRE_HDR_LEN + 64 + 2], buf[512];
	struct wire_hdr h = { .version = WIRE_VERSION, .type = 3, .seq = 2,
			      .meta_len = 32 };
	size_t hl;
	struct nslog_status s0, s1;
	int fd, silent, target, leader;
	uint64_t seed = 99;

	leader = wait_leader(w, 5000);
	target = (leader + 1) % 3;
	s0 = status(w, target);
	/* Silent: closed at the handshake's time limit (checked last). */
	silent = raw_connect(w->addrs[target]);

	/* Random bytes. */
	fd = raw_connect(w->addrs[target]);
	for (size_t i = 0; i < sizeof(buf); i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		buf[i] = (uint8_t)(seed >> 56);
	}
	assert_int_equal(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	assert_true(closed_within(fd, 3000));
	close(fd);

	/* A HELLO from the leader's raft id in group "g1". */
	hl = doc_hello(hello, leader, (uint64_t)leader + 1, target,
		       (uint64_t)target + 1, "g1");
	fd = raw_connect(w->addrs[target]);
	assert_int_equal(write(fd, hello, hl), (ssize_t)hl);
	assert_true(closed_within(fd, 3000));
	close(fd);

	/* Right group, another raft id. */
	hl = doc_hello(hello, leader, (uint64_t)leader + 1, target,
		       (uint64_t)target + 2, "g0");
	fd = raw_connect(w->addrs[target]);
	assert_int_equal(write(fd, hello, hl), (ssize_t)hl);
	assert_true(closed_within(fd, 3000));
	close(fd);

	/* Right everything, then an AUTH with a wrong MAC. */
	hl = doc_hello(hello, leader, (uint64_t)leader + 1, target,
		       (uint64_t)target + 1, "g0");
	fd = raw_connect(w->addrs[target]);
	assert_int_equal(write(fd, hello, hl), (ssize_t)hl);
	/* CHALLENGE: a header and 80 bytes of meta. */
	assert_int_equal(read(fd, buf, WIRE_HDR_LEN + 80), WIRE_HDR_LEN + 80);
	memset(buf + WIRE_HDR_LEN, 0x5a, 32);
	h.meta_crc = ers_crc32c(0, buf + WIRE_HDR_LEN, 32);
	wire_hdr_encode(&h, buf);
	assert_int_equal(write(fd, buf, WIRE_HDR_LEN + 32), WIRE_HDR_LEN + 32);
	assert_true(closed_within(fd, 3000));
	close(fd);

	assert_true(closed_within(silent, 4 * ELECTION_MS + 3000));
	close(silent);

	s1 = status(w, target);
	assert_true(s1.auth_failed >= s0.auth_failed + 3);
	assert_true(s1.bad_handshakes >= s0.bad_handshakes + 2);
	assert_int_equal(submit(w, target, SUBMIT_MS, &a->id, &a->result), 0);
	assert_int_equal(wait_converged(w, 1, 10000), 1);
}

/*
 * Bad raft links: first bad_input(); then a node with the wrong secret:
 * its raft links are refused both ways, it never catches up; with the
 * right secret it does.
 */
static void test_bad_raft_links(void **state)
{
	struct world *w = world_new(3, 5, 0);
	struct acked a[20];
	struct nslog_status s;
	uint64_t refused = 0, before = 0;
	int k = 0, victim, leader;

	(void)state;
	start_all(w);
	bad_input(w, &a[0]);
	for (k = 1; k < 5; k++)
		assert_int_equal(submit(w, k % 3, SUBMIT_MS, &a[k].id,
					&a[k].result), 0);
	leader = wait_leader(w, 5000);
	victim = (leader + 1) % 3;
	for (int i = 0; i < 3; i++)
		if (i != victim)
			before += status(w, i).auth_failed;
	kill_node(w, victim);
	start_node_with(w, victim, &w->wrong);
	for (; k < 15; k++)
		assert_int_equal(submit(w, leader, SUBMIT_MS, &a[k].id,
					&a[k].result), 0);
	/*
	 * Both ways: it refuses the others' links, and theirs once it
	 * campaigns (an election timeout: time enough to catch up, were it
	 * let in).  It has only what it had on disk, and no leader.
	 */
	for (int t = 0; t < 250 && !status(w, victim).auth_failed; t++)
		sleep_ms(20);
	for (int i = 0; i < 3; i++)
		refused += status(w, i).auth_failed;
	assert_true(status(w, victim).auth_failed > 0);
	assert_true(refused > before + status(w, victim).auth_failed);
	assert_true(fsm_get(w, victim, F_N) <= 5);
	s = status(w, victim);
	assert_false(s.is_leader);
	assert_int_not_equal(nslog_barrier(w->node[victim].l, 300), 0);

	kill_node(w, victim);
	start_node(w, victim);
	assert_int_equal(wait_converged(w, 15, 10000), 15);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 15; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	assert_no_divergence(w);
	world_free(w);
}

/* The raw peer of test_bad_frames hears the nodes' probes, answers none. */
static int ignore_frame(void *ctx, int node, const struct peer_frame *f,
			void *cookie, int bulk_rc)
{
	(void)ctx;
	(void)node;
	(void)f;
	(void)cookie;
	(void)bulk_rc;
	return 0;
}

/*
 * Malformed frames of the nslog range, from a peer that is not an nslog:
 * each is refused (the link closed, counted), a good probe is answered,
 * and the node goes on.  No raft starts: the third node never answers.
 */
static void test_bad_frames(void **state)
{
	struct world *w = world_new(3, 8, 0);
	struct peer_rx rx = { .deliver = ignore_frame };
	struct peer_xport *raw;
	uint8_t meta[80], rm[32], bulk[4] = { 1, 2, 3, 4 };
	struct peer_stats ps;
	uint64_t base;
	struct {
		uint16_t type, flags;
		uint32_t meta_len;
		int node;	/* header's node (-1: no header) */
		int version;
		bool bulk;
	} bad[] = {
		{ PEER_T_NSLOG_FIRST, 0, 3, -1, 1, false },	/* probe */
		{ PEER_T_NSLOG_FIRST, 0, 72, -1, 1, false },	/* 9 incs */
		{ PEER_T_NSLOG_FIRST + 1, 0, 24, 1, 1, true },	/* not me */
		{ PEER_T_NSLOG_FIRST + 1, 0, 24, 2, 7, true },	/* version */
		{ PEER_T_NSLOG_FIRST + 1, 0, 20, 2, 1, false },	/* short */
		{ PEER_T_NSLOG_FIRST + 2, 0, 8, -1, 1, false },	/* barrier */
		{ PEER_T_NSLOG_FIRST + 3, 0, 24, 2, 1, true },	/* gen+bulk */
		{ PEER_T_NSLOG_FIRST + 4, 0, 4, -1, 1, false },	/* join */
		{ PEER_T_NSLOG_FIRST + 8, 0, 0, -1, 1, false },	/* unknown */
		{ PEER_T_NSLOG_FIRST, PEER_F_ERROR, 8, -1, 1, false },
	};
	int nbad = (int)(sizeof(bad) / sizeof(bad[0]));

	(void)state;
	start_node(w, 0);
	start_node(w, 1);
	assert_int_equal(peer_fake_new(w->net, 2, ++w->next_inc, &raw), 0);
	/* Refusing their probes would close links our frames travel on. */
	assert_int_equal(peer_register(raw, PEER_T_NSLOG_FIRST,
				       PEER_T_NSLOG_LAST, &rx), 0);
	assert_int_equal(peer_start(raw), 0);

	for (int i = 0; i < nbad; i++) {
		struct peer_frame f = {
			.type = bad[i].type,
			.flags = bad[i].flags,
			.meta = meta,
			.meta_len = bad[i].meta_len,
		};

		memset(meta, 0, sizeof(meta));
		meta[0] = 1; /* an incarnation, or a header's version */
		if (bad[i].node >= 0) {
			meta[0] = (uint8_t)bad[i].version;
			meta[1] = bad[i].type == PEER_T_NSLOG_FIRST + 3 ? 2 : 1;
			meta[2] = (uint8_t)bad[i].node;
			meta[8] = meta[16] = 1; /* incarnation, request id */
		}
		if (bad[i].bulk) {
			f.bulk = bulk;
			f.bulk_len = sizeof(bulk);
			f.bulk_crc = ers_crc32c(0, bulk, sizeof(bulk));
		}
		/*
		 * One at a time: a refusal closes the link and loses what is
		 * in flight on it, this frame too if it went out just before
		 * the link went down: then it is sent again.
		 */
		peer_stats(w->node[0].x, 2, &ps);
		base = ps.bad_frames;
		for (int t = 0; t < 300; t++) {
			if (t % 50 == 0)
				assert_int_equal(peer_send(raw, 0, &f, 1000),
						 0);
			peer_stats(w->node[0].x, 2, &ps);
			if (ps.bad_frames > base)
				break;
			sleep_ms(10);
		}
		assert_true(ps.bad_frames > base);
	}

	/* A good probe: "empty", not witnessed, no leader, no raft id. */
	{
		struct peer_frame req = {
			.type = PEER_T_NSLOG_FIRST,
			.meta = meta,
			.meta_len = 8,
		};
		struct peer_reply rep = { .meta = rm, .meta_cap = sizeof(rm) };

		int rc = -ECONNRESET;

		memset(meta, 0, 8);
		meta[0] = 42;
		/* The last refusal's link may go down under the first try. */
		for (int t = 0; t < 5 && rc == -ECONNRESET; t++)
			rc = peer_call(raw, 0, &req, &rep, 2000);
		assert_int_equal(rc, 0);
		assert_int_equal(rep.meta_len, 24);
		assert_int_equal(rm[0], 0);
		assert_int_equal(rm[1], 0);
		assert_int_equal(rm[2], 0xff);
		assert_int_equal(rm[3], 0xff);
	}
	peer_stats(w->node[0].x, 2, &ps);
	base = ps.bad_frames;
	assert_true(base >= (uint64_t)nbad);
	sleep_ms(100);
	peer_stats(w->node[0].x, 2, &ps);
	assert_int_equal(ps.bad_frames, base); /* the good one was not */
	assert_int_equal(status(w, 0).raft_id, 0);
	peer_free(raw);
	world_free(w);
}

/*
 * The same over the real TCP peer transport (authenticated, as the daemon
 * runs it): every node submits at once, the leader dies, its replacement
 * joins on an empty disk.
 */
static void test_over_peer_tcp(void **state)
{
	struct world *w = world_new(3, 9, 8);
	struct acked a[64];
	int na = 0, leader;

	(void)state;
	w->tcp = true;
	start_all(w);
	burst_all(w, 6, -1, a, &na);
	leader = wait_leader(w, 5000);
	assert_true(leader >= 0);
	kill_node(w, leader);
	rm_rf(w->node[leader].dir);
	start_node(w, leader);
	burst_all(w, 3, leader, a, &na);
	wait_voters(w, 3, 15000);
	assert_int_equal(status(w, leader).raft_id,
			 (uint64_t)leader + 1 + GRP_MAX_NODES);
	burst_all(w, 2, -1, a, &na);
	assert_int_equal(na, 30);
	assert_int_equal(wait_converged(w, 30, 10000), 30);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	assert_no_divergence(w);
	world_free(w);
}

/* Tell every up node but @i that node @i's raft is at w->addrs[i]. */
static void tell_addr(struct world *w, int i)
{
	for (int k = 0; k < w->n; k++)
		if (k != i && w->node[k].up)
			assert_int_equal(nslog_set_addr(w->node[k].l, i,
							w->addrs[i]),
					 0);
}

/*
 * A registry group's addresses come late and change (group.c hands each
 * to nslog_set_addr()).  Nodes that start without a peer's address found
 * the log only once they have it; a node restarted on its disk at another
 * address is left behind until the others are told, then catches up; a
 * replacement that listens where another node listened before it moved is
 * added (raft's configuration names ids by label, never by address, and
 * refuses two members with one address).
 */
static void test_addresses(void **state)
{
	struct world *w = world_new(3, 11, 8);
	struct acked a[64];
	char longer[NSLOG_ADDR_MAX + 8], was[64];
	int na = 0, leader, mv, rp, behind;
	uint64_t id;
	int result;

	(void)state;
	w->unknown[0][2] = w->unknown[1][2] = true;
	for (int i = 0; i < 3; i++)
		start_node(w, i);
	sleep_ms(4 * ELECTION_MS);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(status(w, i).raft_id, 0);
		assert_int_equal(status(w, i).addrs_unknown, 1);
		assert_int_equal(submit(w, i, 100, &id, &result), -ENOTCONN);
	}
	assert_int_equal(status(w, 2).addrs_unknown, 0);
	assert_true(status(w, 2).leader < 0); /* alone it cannot elect */

	/* What nslog_set_addr() refuses. */
	assert_int_equal(nslog_set_addr(w->node[0].l, 0, w->addrs[1]),
			 -EINVAL);
	assert_int_equal(nslog_set_addr(w->node[0].l, 3, w->addrs[1]),
			 -EINVAL);
	assert_int_equal(nslog_set_addr(w->node[0].l, -1, w->addrs[1]),
			 -EINVAL);
	assert_int_equal(nslog_set_addr(w->node[0].l, 2, "no port"),
			 -EINVAL);
	memset(longer, 'a', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(nslog_set_addr(w->node[0].l, 2, longer),
			 -ENAMETOOLONG);
	assert_int_equal(status(w, 0).addrs_unknown, 1);

	tell_addr(w, 2);
	assert_true(wait_leader(w, 10000) >= 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(status(w, i).addrs_unknown, 0);
		assert_int_equal(status(w, i).raft_id, (uint64_t)i + 1);
	}
	/* Told again the same: nothing changes. */
	tell_addr(w, 2);
	burst_all(w, 4, -1, a, &na);
	assert_int_equal(wait_converged(w, (size_t)na, 10000), (size_t)na);

	/* A follower restarted on its disk at another address. */
	leader = wait_leader(w, 5000);
	assert_true(leader >= 0);
	mv = (leader + 1) % 3;
	rp = (leader + 2) % 3;
	kill_node(w, mv);
	memcpy(was, w->addr_buf[mv], sizeof(was));
	snprintf(w->addr_buf[mv], sizeof(w->addr_buf[mv]), "127.0.0.1:%d",
		 free_port());
	/*
	 * It has a log: its raft runs at once, with only the addresses it
	 * has (the registry may name nobody yet when it restarts).
	 */
	memset(w->unknown, 0, sizeof(w->unknown));
	w->unknown[mv][rp] = true;
	start_node(w, mv);
	for (int k = 0; k < 100 && !status(w, mv).raft_id; k++)
		sleep_ms(20);
	assert_int_equal(status(w, mv).raft_id, (uint64_t)mv + 1);
	assert_int_equal(status(w, mv).addrs_unknown, 1);
	behind = na;
	burst_all(w, 3, mv, a, &na);
	/* The others still send to where it was: it gets nothing new. */
	sleep_ms(4 * ELECTION_MS);
	assert_true(fsm_get(w, mv, F_N) <= behind);
	tell_addr(w, mv);
	assert_int_equal(wait_converged(w, (size_t)na, 10000), (size_t)na);
	assert_int_equal(status(w, mv).raft_id, (uint64_t)mv + 1);

	/* Another follower replaced on an empty disk where mv was. */
	kill_node(w, rp);
	rm_rf(w->node[rp].dir);
	memcpy(w->addr_buf[rp], was, sizeof(was));
	start_node(w, rp);
	tell_addr(w, rp);
	assert_int_equal(status(w, mv).addrs_unknown, 0);
	wait_voters(w, 3, 15000);
	assert_int_equal(status(w, rp).raft_id,
			 (uint64_t)rp + 1 + GRP_MAX_NODES);
	burst_all(w, 2, -1, a, &na);
	assert_int_equal(wait_converged(w, (size_t)na, 10000), (size_t)na);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	assert_no_divergence(w);
	world_free(w);
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Submits from random nodes in the background, during kills and restarts. */
struct bg {
	struct world *w;
	pthread_rwlock_t *nlock;	/* [MAXN]: held to kill or start */
	uint64_t rng;
	bool stop;			/* under w->lock */
	struct acked a[400];
	int na, failed;
};

static struct bg *cur_bg;
static pthread_t cur_bg_thread;

static void bg_stop(struct bg *b)
{
	pthread_mutex_lock(&b->w->lock);
	b->stop = true;
	pthread_mutex_unlock(&b->w->lock);
	pthread_join(cur_bg_thread, NULL);
	cur_bg = NULL;
}

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	struct world *w = b->w;

	for (;;) {
		int i = (int)(rng_next(&b->rng) % (uint64_t)w->n), rc;
		struct acked x;
		bool up;

		pthread_mutex_lock(&w->lock);
		if (b->stop || b->na == 400) {
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		pthread_mutex_unlock(&w->lock);
		pthread_rwlock_rdlock(&b->nlock[i]);
		up = w->node[i].up;
		if (up) {
			rc = submit(w, i, 2000, &x.id, &x.result);
			if (rc == 0)
				b->a[b->na++] = x;
			else
				b->failed++;
		}
		pthread_rwlock_unlock(&b->nlock[i]);
		if (!up)
			sleep_ms(10);
	}
}

/*
 * A random schedule on five nodes: submits from random nodes (in this
 * thread, and in another all along), kills of the leader or of any node
 * (at most two down), restarts on the same disk or on an empty one (a
 * replacement).  No index ever applies two entries; every acknowledged
 * entry is applied once everywhere, at its result's place.
 */
static void test_random_schedule(void **state)
{
	const char *env = getenv("NSLOG_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0) :
				      (uint64_t)time(NULL) ^ (uint64_t)getpid();
	uint64_t rng = seed | 1, until;
	struct acked *a = calloc(800, sizeof(*a));
	pthread_rwlock_t nlock[MAXN];
	int na = 0, down = 0, failed = 0, step, replaced = 0;
	struct bg *b = calloc(1, sizeof(*b));
	struct world *w;

	(void)state;
	printf("test_random_schedule: NSLOG_SEED=%" PRIu64 "\n", seed);
	fflush(stdout);
	assert_non_null(a);
	assert_non_null(b);
	for (int i = 0; i < MAXN; i++)
		pthread_rwlock_init(&nlock[i], NULL);
	w = world_new(5, seed, 16);
	start_all(w);
	*b = (struct bg){ .w = w, .nlock = nlock, .rng = seed * 7 + 1 };
	assert_int_equal(pthread_create(&cur_bg_thread, NULL, bg_main, b), 0);
	cur_bg = b;
	until = now_ms() + 8000;
	for (step = 0; step < 32 && now_ms() < until && na < 400; step++) {
		unsigned r = (unsigned)(rng_next(&rng) % 100);
		int i = (int)(rng_next(&rng) % 5), rc;

		if (r < 80) {
			struct acked x;

			if (!w->node[i].up)
				continue;
			rc = submit(w, i, 3000, &x.id, &x.result);
			if (rc == 0)
				a[na++] = x;
			else
				failed++;
		} else if (r < 88 && down < 2) {
			int leader = wait_leader(w, 3000);
			int victim = r < 84 && leader >= 0 ? leader : i;

			if (!w->node[victim].up)
				continue;
			pthread_rwlock_wrlock(&nlock[victim]);
			kill_node(w, victim);
			pthread_rwlock_unlock(&nlock[victim]);
			down++;
		} else if (down > 0) {
			for (i = 0; w->node[i].up; i++)
				;
			pthread_rwlock_wrlock(&nlock[i]);
			if (r >= 94)
				rm_rf(w->node[i].dir); /* a replacement */
			start_node(w, i);
			pthread_rwlock_unlock(&nlock[i]);
			down--;
			if (r >= 94) {
				replaced++;
				wait_voters(w, 5, 15000);
			}
		}
	}
	bg_stop(b);
	for (int i = 0; i < 5; i++)
		if (!w->node[i].up)
			start_node(w, i);
	wait_voters(w, 5, 15000);
	printf("test_random_schedule: %d steps, %d replacements, %d + %d "
	       "acknowledged, %d + %d failed\n",
	       step, replaced, na, b->na, failed, b->failed);
	assert_true(na + b->na > 10);
	for (int j = 0; j < b->na; j++)
		a[na++] = b->a[j];
	assert_true(wait_converged(w, (size_t)na, 15000) >= (size_t)na);
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < na; j++)
			assert_acked(w, i, a[j].id, a[j].result);
	assert_no_divergence(w);
	world_free(w);
	for (int i = 0; i < MAXN; i++)
		pthread_rwlock_destroy(&nlock[i]);
	free(b);
	free(a);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

/* Wait until every node has applied at least @n entries; false after @ms. */
static bool wait_all_hold(struct world *w, int n, int ms)
{
	uint64_t until = now_ms() + (uint64_t)ms;

	for (;;) {
		bool all = true;

		for (int i = 0; i < w->n && all; i++)
			all = fsm_get(w, i, F_N) >= n;
		if (all)
			return true;
		if (now_ms() > until)
			return false;
		sleep_ms(1);
	}
}

/*
 * A commit reaches the followers within a round trip, not at the next
 * heartbeat (libraft sends leader_commit only in AppendEntries; the
 * leader's commit push is a barrier appended once all is applied).  The
 * heartbeat is long here (500 ms): without the push, a follower's submit
 * and the other nodes' applies would take 500 ms at least (raft's
 * heartbeat waits a whole heartbeat after the entry's message).  Medians
 * of several submits, from followers and from the leader, must stay under
 * half a heartbeat; a loaded machine adds milliseconds, not hundreds.
 * Then the log goes quiet: pushes do not chain.
 */
static void test_commit_push(void **state)
{
	enum { HB = 500, ROUNDS = 5 };
	struct world *w = world_new(3, 12, 0);
	uint64_t sub[ROUNDS], all[2 * ROUNDS], id;
	struct nslog_status s0, s1;
	int leader, from, result, na = 0;

	(void)state;
	w->heartbeat_ms = HB;
	w->election_ms = 5 * HB;
	for (int i = 0; i < 3; i++)
		start_node(w, i);
	leader = wait_leader(w, 30000);
	assert_true(leader >= 0);
	/* Links made and followers in raft's pipeline mode. */
	for (int i = 0; i < 3; i++)
		assert_int_equal(submit(w, i, SUBMIT_MS, &id, &result), 0);
	assert_int_equal(wait_converged(w, 3, 10000), 3);

	for (int k = 0; k < 2 * ROUNDS; k++) {
		uint64_t t0, t1;
		int rc;

		/* Followers in turn, then the leader. */
		from = k < ROUNDS ? (leader + 1 + k % 2) % 3 : leader;
		/* Not just after a heartbeat: anywhere in one. */
		sleep_ms((int)((uint64_t)k * 97 % HB));
		t0 = now_ms();
		rc = submit(w, from, SUBMIT_MS, &id, &result);
		t1 = now_ms();
		assert_int_equal(rc, 0);
		assert_true(wait_all_hold(w, result, 10000));
		all[na++] = now_ms() - t0;
		if (k < ROUNDS)
			sub[k] = t1 - t0;
		assert_acked(w, from, id, result);
	}
	print_message("commit push: follower submit median %" PRIu64
		      " ms, all applied median %" PRIu64 " ms (heartbeat %d "
		      "ms)\n", median(sub, ROUNDS), median(all, na), HB);
	assert_true(median(sub, ROUNDS) < HB / 2);
	assert_true(median(all, na) < HB / 2);
	assert_int_equal(wait_leader(w, 5000), leader);

	/* Quiet: the push's own commit travels with a heartbeat, no more. */
	s0 = status(w, leader);
	sleep_ms(2 * HB);
	s1 = status(w, leader);
	if (s1.term == s0.term)
		assert_int_equal(s1.last_index, s0.last_index);
	assert_no_divergence(w);
	world_free(w);
}

/*
 * nslog_check() of node @self of @nodes in @group on @dir, with nothing
 * started: the daemon's test of --state-dir before it mounts.  With
 * @start, nslog_start() on it instead (without a check first), stopped
 * again at once: only for a dir it must refuse.
 */
static int open_dir(struct world *w, int self, int nodes, const char *group,
		    const char *dir, bool start)
{
	struct peer_fakenet *net = peer_fakenet_new(nodes, 1);
	struct nslog_fsm fsm = {
		.apply = f_apply,
		.snapshot = f_snapshot,
		.restore = f_restore,
	};
	struct nslog_opts o = {
		.self = self,
		.nodes = nodes,
		.incarnation = ++w->next_inc,
		.addrs = w->addrs,
		.dir = dir,
		.secret = &w->secret,
		.group = group,
	};
	struct nslog *l;
	int rc;

	assert_non_null(net);
	assert_int_equal(peer_fake_new(net, self, o.incarnation, &o.x), 0);
	assert_int_equal(nslog_new(&o, &fsm, &l), 0);
	if (start) {
		assert_int_equal(peer_start(o.x), 0);
		rc = nslog_start(l);
		nslog_stop(l);
	} else {
		rc = nslog_check(l);
	}
	peer_stop(o.x);
	nslog_free(l);
	peer_free(o.x);
	peer_fakenet_free(net);
	return rc;
}

static int check_dir(struct world *w, int self, int nodes, const char *group,
		     const char *dir)
{
	return open_dir(w, self, nodes, group, dir, false);
}

/*
 * A state dir is checked without starting anything: made (0700) when
 * missing; refused when it is another node's, group's or group size's,
 * holds raft files without nslog.state, or lost raft's files.
 */
static void test_check_dir(void **state)
{
	struct world *w = world_new(3, 11, 0);
	char dir[1024], path[1100];
	struct stat st;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/new/a/b", w->base);
	assert_int_equal(check_dir(w, 0, 3, "g0", dir), 0);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);

	start_all(w);
	assert_true(wait_leader(w, 5000) >= 0);
	kill_node(w, 1);
	assert_int_equal(check_dir(w, 1, 3, "g0", w->node[1].dir), 0);
	assert_int_equal(check_dir(w, 0, 3, "g0", w->node[1].dir), -EINVAL);
	assert_int_equal(check_dir(w, 1, 3, "g1", w->node[1].dir), -EINVAL);
	assert_int_equal(check_dir(w, 1, 2, "g0", w->node[1].dir), -EINVAL);
	/* The check changed nothing: node 1 starts on its dir again. */
	start_node(w, 1);
	assert_true(wait_leader(w, 5000) >= 0);
	kill_node(w, 1);

	snprintf(path, sizeof(path), "%s/nslog.state", w->node[1].dir);
	snprintf(dir, sizeof(dir), "%s/nslog.state.keep", w->base);
	assert_int_equal(rename(path, dir), 0);
	assert_int_equal(check_dir(w, 1, 3, "g0", w->node[1].dir), -EINVAL);
	assert_int_equal(rename(dir, path), 0);
	remove_raft_files(w->node[1].dir);
	assert_int_equal(check_dir(w, 1, 3, "g0", w->node[1].dir), -EINVAL);
}

/*
 * One nslog per state dir (issue 30): a second one on a dir in use, by its
 * check or its start, is refused at once (-EBUSY) before it reads
 * anything there, and the node that holds it goes on committing.
 * The lock file names the holder's pid.  Once the holder is gone
 * (nslog_free, as at a daemon's exit or death) its node starts there
 * again at once.
 */
static void test_dir_locked(void **state)
{
	struct world *w = world_new(3, 12, 0);
	char path[1100], buf[32];
	uint64_t id;
	int result, fd;
	ssize_t n;

	(void)state;
	start_all(w);
	snprintf(path, sizeof(path), "%s/.reftfs-lock", w->node[1].dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_int_equal(strtol(buf, NULL, 10), (long)getpid());

	assert_int_equal(check_dir(w, 1, 3, "g0", w->node[1].dir), -EBUSY);
	assert_int_equal(open_dir(w, 1, 3, "g0", w->node[1].dir, true), -EBUSY);
	/* Refused before its own checks: not "another node's" (-EINVAL). */
	assert_int_equal(check_dir(w, 0, 3, "g0", w->node[1].dir), -EBUSY);

	/* The holder commits on, from itself and from the others. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(submit(w, i, SUBMIT_MS, &id, &result), 0);
		assert_acked(w, i, id, result);
	}

	/* Gone: its dir is free at once, for a check and for a restart. */
	kill_node(w, 1);
	assert_int_equal(check_dir(w, 1, 3, "g0", w->node[1].dir), 0);
	start_node(w, 1);
	assert_int_equal(submit(w, 1, SUBMIT_MS, &id, &result), 0);
	assert_acked(w, 1, id, result);
	assert_no_divergence(w);
}

/* After a failed test too: no thread, port or directory left behind. */
static int teardown(void **state)
{
	(void)state;
	if (cur_bg)
		bg_stop(cur_bg);
	if (cur_world)
		world_free(cur_world);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_submit_everywhere, teardown),
		cmocka_unit_test_teardown(test_leader_killed_and_back,
					  teardown),
		cmocka_unit_test_teardown(test_retries_apply_once, teardown),
		cmocka_unit_test_teardown(test_replacement, teardown),
		cmocka_unit_test_teardown(test_force_remove, teardown),
		cmocka_unit_test_teardown(test_minority_partition, teardown),
		cmocka_unit_test_teardown(test_bad_raft_links, teardown),
		cmocka_unit_test_teardown(test_bad_frames, teardown),
		cmocka_unit_test_teardown(test_over_peer_tcp, teardown),
		cmocka_unit_test_teardown(test_addresses, teardown),
		cmocka_unit_test_teardown(test_random_schedule, teardown),
		cmocka_unit_test_teardown(test_commit_push, teardown),
		cmocka_unit_test_teardown(test_check_dir, teardown),
		cmocka_unit_test_teardown(test_dir_locked, teardown),
	};

	/* NSLOG_TEST=name runs one test (a glob). */
	if (getenv("NSLOG_TEST"))
		cmocka_set_test_filter(getenv("NSLOG_TEST"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
