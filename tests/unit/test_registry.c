/*
 * test_registry.c - membership's memcached registry against a real
 * memcached started here (killed in teardown, and by the kernel if this
 * program dies), over the fake transport: nodes publish their addresses
 * and learn each other's, memcached killed and restarted mid-run changes
 * no node's state, a node started while it is down learns the addresses
 * once it is back, a replacement's new address reaches the others (the
 * transport and the address listener, the namespace log's), and a
 * registry that never answers delays nothing.  The same over real TCP,
 * where the registry is the only way the nodes find each other.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <libmemcached/memcached.h>

#include "group_test.h"

#define MEMCACHED_BIN "/usr/bin/memcached"
#define MAXN 4
#define HB_MS 25
#define SUSPECT_MS 150
#define DEAD_MS 400
#define WAIT_MS 8000
#define GROUP "test-group"

struct rnode {
	bool live;
	uint64_t inc;
	char listen[64];
	struct peer_xport *x;
	struct memb *m;
	pthread_mutex_t lock;
	int n_dead;		/* DEAD changes seen, of any node */
	char heard[MAXN][128];	/* the address listener's last word */
	int n_heard;		/* its calls */
	bool heard_self;	/* it was called for this node: wrong */
};

struct fx {
	pid_t mc;		/* memcached, 0 when not running */
	int port;
	char registry[32];
	struct peer_fakenet *net;
	struct peer_fakenet *net2;	/* a taken-over daemon's own */
	uint64_t next_inc;
	int silent_fd;		/* a listener that never answers */
	struct rnode node[MAXN];
};

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

#define WAIT_FOR(cond, ms)                                                     \
	({                                                                     \
		uint64_t end_ = now_ms() + (ms);                               \
		bool ok_;                                                      \
		while (!(ok_ = (cond)) && now_ms() < end_)                     \
			sleep_ms(5);                                           \
		ok_;                                                           \
	})

/* A loopback listener on a port the kernel chose; its fd, or -1. */
static int listen_any(int *port, int backlog)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

static bool port_answers(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* Start memcached on @port; its pid once it accepts, or -1. */
static pid_t mc_start(int port)
{
	char p[16];
	struct passwd *pw = getpwuid(geteuid());
	pid_t pid;
	int fd, status;
	uint64_t end;

	snprintf(p, sizeof(p), "%d", port);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* Dies with this test, however the test ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* memcached refuses root without -u. */
		if (geteuid() == 0 && pw)
			execl(MEMCACHED_BIN, "memcached", "-p", p, "-l",
			      "127.0.0.1", "-U", "0", "-u", pw->pw_name,
			      (char *)NULL);
		else
			execl(MEMCACHED_BIN, "memcached", "-p", p, "-l",
			      "127.0.0.1", "-U", "0", (char *)NULL);
		_exit(127);
	}
	end = now_ms() + 5000;
	while (now_ms() < end) {
		if (port_answers(port))
			return pid;
		if (waitpid(pid, &status, WNOHANG) == pid)
			return -1;	/* the port was taken meanwhile */
		sleep_ms(10);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

static void mc_kill(struct fx *f)
{
	if (f->mc <= 0)
		return;
	kill(f->mc, SIGKILL);
	waitpid(f->mc, NULL, 0);
	f->mc = 0;
}

/* memcached on a free port (a few tries: a port can be taken between). */
static int mc_fresh(struct fx *f)
{
	int fd, i;

	for (i = 0; i < 5; i++) {
		fd = listen_any(&f->port, 1);
		if (fd < 0)
			return -1;
		close(fd);
		f->mc = mc_start(f->port);
		if (f->mc > 0) {
			snprintf(f->registry, sizeof(f->registry),
				 "127.0.0.1:%d", f->port);
			return 0;
		}
	}
	f->mc = 0;
	return -1;
}

static void on_change(void *ctx, const struct memb_view *v, int node,
		      enum memb_state was, uint64_t was_inc)
{
	struct rnode *n = ctx;

	(void)was;
	(void)was_inc;
	pthread_mutex_lock(&n->lock);
	if (v->node[node].state == MEMB_DEAD)
		n->n_dead++;
	pthread_mutex_unlock(&n->lock);
}

/* The address listener (the namespace log's, in a daemon). */
static void on_addr(void *ctx, int node, const char *addr)
{
	struct rnode *n = ctx;

	pthread_mutex_lock(&n->lock);
	if (node >= 0 && node < MAXN)
		snprintf(n->heard[node], sizeof(n->heard[node]), "%s", addr);
	n->n_heard++;
	pthread_mutex_unlock(&n->lock);
}

/* Node @self in slot @slot of @f, on fake network @net. */
static void node_start_on(struct fx *f, int slot, int self, int nodes,
			  const char *listen, struct peer_fakenet *net)
{
	struct rnode *n = &f->node[slot];
	struct memb_opts o = {
		.self = self,
		.nodes = nodes,
		.heartbeat_ms = HB_MS,
		.suspect_ms = SUSPECT_MS,
		.dead_ms = DEAD_MS,
		.registry = f->registry,
		.group = GROUP,
	};

	memset(n, 0, sizeof(*n));
	pthread_mutex_init(&n->lock, NULL);
	snprintf(n->listen, sizeof(n->listen), "%s", listen);
	o.listen_addr = n->listen;
	n->inc = o.incarnation = f->next_inc++;
	assert_int_equal(peer_fake_new(net, self, n->inc, &n->x), 0);
	assert_int_equal(memb_new(&o, n->x, &n->m), 0);
	assert_int_equal(memb_listen(n->m, on_change, n), 0);
	assert_int_equal(memb_listen_addrs(n->m, on_addr, n), 0);
	assert_int_equal(peer_start(n->x), 0);
	assert_int_equal(memb_start(n->m), 0);
	n->live = true;
}

static void node_start(struct fx *f, int i, int nodes, const char *listen)
{
	node_start_on(f, i, i, nodes, listen, f->net);
}

/*
 * The same over the real TCP transport, listening on a port the kernel
 * picks: its peers can find it only through the registry.
 */
static void node_start_tcp(struct fx *f, int i, int nodes)
{
	static struct grp_secret secret = { .len = 32 };
	struct rnode *n = &f->node[i];
	struct peer_tcp_opts to = {
		.self = i,
		.nodes = nodes,
		.group = GROUP,
		.listen = "127.0.0.1:0",
		.secret = &secret,
		.handshake_ms = 2000,
		.idle_ms = 10000,
	};
	struct memb_opts o = {
		.self = i,
		.nodes = nodes,
		.heartbeat_ms = HB_MS,
		.suspect_ms = SUSPECT_MS,
		.dead_ms = DEAD_MS,
		.registry = f->registry,
		.group = GROUP,
	};

	memset(secret.key, 0x5a, secret.len);
	memset(n, 0, sizeof(*n));
	pthread_mutex_init(&n->lock, NULL);
	n->inc = to.incarnation = o.incarnation = f->next_inc++;
	assert_int_equal(peer_tcp_new(&to, &n->x), 0);
	snprintf(n->listen, sizeof(n->listen), "127.0.0.1:%d",
		 peer_tcp_port(n->x));
	o.listen_addr = n->listen;
	assert_int_equal(memb_new(&o, n->x, &n->m), 0);
	assert_int_equal(memb_listen(n->m, on_change, n), 0);
	assert_int_equal(peer_start(n->x), 0);
	assert_int_equal(memb_start(n->m), 0);
	n->live = true;
}

static void node_stop(struct fx *f, int i)
{
	struct rnode *n = &f->node[i];

	if (!n->live)
		return;
	memb_stop(n->m);
	peer_free(n->x);
	memb_free(n->m);
	pthread_mutex_destroy(&n->lock);
	n->live = false;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->silent_fd = -1;
	f->next_inc = 0x5000;
	*state = f;
	if (access(MEMCACHED_BIN, X_OK) != 0) {
		print_message("no %s: skipped\n", MEMCACHED_BIN);
		return 0;
	}
	if (mc_fresh(f) < 0)
		return -1;
	f->net = peer_fakenet_new(MAXN, 1);
	if (!f->net)
		return -1;
	peer_fakenet_delay(f->net, 0, 3);
	return 0;
}

/* Runs however the test ended: nothing it started outlives it. */
static int teardown(void **state)
{
	struct fx *f = *state;
	int i;

	for (i = 0; i < MAXN; i++)
		node_stop(f, i);
	if (f->net)
		peer_fakenet_free(f->net);
	if (f->net2)
		peer_fakenet_free(f->net2);
	mc_kill(f);
	if (f->silent_fd >= 0)
		close(f->silent_fd);
	free(f);
	return 0;
}

static bool addr_is(struct fx *f, int a, int b, const char *want)
{
	char got[128];
	struct memb_view v;

	/* What the fake transport was given (a TCP one cannot say). */
	if (peer_fake_addr(f->node[a].x, b, got, sizeof(got)) == 0 &&
	    strcmp(got, want) != 0)
		return false;
	memb_get_view(f->node[a].m, &v);
	return strcmp(v.node[b].addr, want) == 0;
}

/*
 * Node @a's address listener last said @want for node @b, and was never
 * called for @a itself.
 */
static bool heard_is(struct fx *f, int a, int b, const char *want)
{
	struct rnode *n = &f->node[a];
	bool ok;

	pthread_mutex_lock(&n->lock);
	ok = strcmp(n->heard[b], want) == 0 && n->heard[a][0] == '\0';
	pthread_mutex_unlock(&n->lock);
	return ok;
}

static int heard_calls(struct fx *f, int a)
{
	int n;

	pthread_mutex_lock(&f->node[a].lock);
	n = f->node[a].n_heard;
	pthread_mutex_unlock(&f->node[a].lock);
	return n;
}

static bool all_know(struct fx *f, int nodes)
{
	int a, b;

	for (a = 0; a < nodes; a++)
		for (b = 0; b < nodes; b++)
			if (a != b && f->node[a].live && f->node[b].live &&
			    !addr_is(f, a, b, f->node[b].listen))
				return false;
	return true;
}

static bool all_up(struct fx *f, int nodes)
{
	struct memb_view v;
	int a, b;

	for (a = 0; a < nodes; a++) {
		if (!f->node[a].live)
			continue;
		memb_get_view(f->node[a].m, &v);
		for (b = 0; b < nodes; b++)
			if (f->node[b].live &&
			    (v.node[b].state != MEMB_UP ||
			     v.node[b].incarnation != f->node[b].inc))
				return false;
	}
	return true;
}

/* What memcached holds for node @id, "" when nothing. */
static void mc_entry(struct fx *f, int id, char *out, size_t cap)
{
	memcached_st *mc = memcached_create(NULL);
	char key[64];
	memcached_return_t rc;
	uint32_t flags;
	size_t len;
	char *v;

	out[0] = 0;
	assert_non_null(mc);
	assert_int_equal(memcached_server_add(mc, "127.0.0.1",
					      (in_port_t)f->port),
			 MEMCACHED_SUCCESS);
	snprintf(key, sizeof(key), "reftfs/%s/node/%d", GROUP, id);
	v = memcached_get(mc, key, strlen(key), &len, &flags, &rc);
	if (v) {
		snprintf(out, cap, "%.*s", (int)len, v);
		free(v);
	} else {
		assert_int_equal(rc, MEMCACHED_NOTFOUND);
	}
	memcached_free(mc);
}

/* Write node @id's entry as a daemon would. */
static void mc_put(struct fx *f, int id, const char *val)
{
	memcached_st *mc = memcached_create(NULL);
	char key[64];

	assert_non_null(mc);
	assert_int_equal(memcached_server_add(mc, "127.0.0.1",
					      (in_port_t)f->port),
			 MEMCACHED_SUCCESS);
	snprintf(key, sizeof(key), "reftfs/%s/node/%d", GROUP, id);
	assert_int_equal(memcached_set(mc, key, strlen(key), val, strlen(val),
				       2, 0),
			 MEMCACHED_SUCCESS);
	memcached_free(mc);
}

/* Wait until the registry holds @n's entry for node @id. */
static void expect_entry_of(struct fx *f, int id, const struct rnode *n)
{
	char want[128], got[128];

	snprintf(want, sizeof(want), "%s %" PRIu64, n->listen, n->inc);
	assert_true(WAIT_FOR((mc_entry(f, id, got, sizeof(got)),
			      strcmp(got, want) == 0),
			     WAIT_MS));
}

static void expect_entry(struct fx *f, int id)
{
	expect_entry_of(f, id, &f->node[id]);
}

static int dead_changes(struct fx *f, int nodes)
{
	int i, n = 0;

	for (i = 0; i < nodes; i++) {
		if (!f->node[i].live)
			continue;
		pthread_mutex_lock(&f->node[i].lock);
		n += f->node[i].n_dead;
		pthread_mutex_unlock(&f->node[i].lock);
	}
	return n;
}

static void test_registry(void **state)
{
	struct fx *f = *state;
	char listen[MAXN][32], got[128], stale[128];
	uint64_t old, end;
	int i, b;

	if (!f->net)
		skip();
	for (i = 0; i < MAXN; i++)
		snprintf(listen[i], sizeof(listen[i]), "10.0.0.%d:7070", i + 1);
	for (i = 0; i < 3; i++)
		node_start(f, i, MAXN, listen[i]);
	/* Published, learned, handed to the transport and the listener. */
	assert_true(WAIT_FOR(all_know(f, 3), WAIT_MS));
	assert_true(WAIT_FOR(all_up(f, 3), WAIT_MS));
	for (i = 0; i < 3; i++)
		expect_entry(f, i);
	for (i = 0; i < 3; i++)
		for (b = 0; b < 3; b++)
			if (b != i)
				assert_true(WAIT_FOR(heard_is(f, i, b,
							      listen[b]),
						     WAIT_MS));
	/* Once per new address: rounds that find the same say nothing. */
	sleep_ms(4 * HB_MS);
	for (i = 0; i < 3; i++)
		assert_int_equal(heard_calls(f, i), 2);

	/* memcached dies: nobody's state changes, addresses stay. */
	mc_kill(f);
	sleep_ms(3 * DEAD_MS);
	assert_true(all_know(f, 3));
	assert_true(WAIT_FOR(all_up(f, 3), WAIT_MS));
	assert_int_equal(dead_changes(f, 3), 0);

	/* A node started meanwhile knows no address yet. */
	node_start(f, 3, MAXN, listen[3]);
	sleep_ms(2 * DEAD_MS);
	for (b = 0; b < 3; b++) {
		assert_int_equal(peer_fake_addr(f->node[3].x, b, got,
						sizeof(got)),
				 0);
		assert_string_equal(got, "");
		assert_true(addr_is(f, b, 3, ""));
	}

	/* memcached back (empty): everyone registers again, node 3 learns
	 * the others and they learn node 3. */
	f->mc = mc_start(f->port);
	assert_true(f->mc > 0);
	assert_true(WAIT_FOR(all_know(f, MAXN), WAIT_MS));
	for (i = 0; i < MAXN; i++)
		expect_entry(f, i);
	assert_true(WAIT_FOR(all_up(f, MAXN), WAIT_MS));
	assert_int_equal(dead_changes(f, 3), 0);

	/* A replacement at another address: the others follow it. */
	old = f->node[1].inc;
	node_stop(f, 1);
	node_start(f, 1, MAXN, "10.0.1.2:7071");
	assert_true(WAIT_FOR(addr_is(f, 0, 1, "10.0.1.2:7071") &&
				     addr_is(f, 2, 1, "10.0.1.2:7071") &&
				     addr_is(f, 3, 1, "10.0.1.2:7071"),
			     WAIT_MS));
	assert_true(WAIT_FOR(all_know(f, MAXN), WAIT_MS));
	assert_true(WAIT_FOR(all_up(f, MAXN), WAIT_MS));
	expect_entry(f, 1);
	for (b = 0; b < MAXN; b++)
		if (b != 1)
			assert_true(WAIT_FOR(heard_is(f, b, 1, "10.0.1.2:7071"),
					     WAIT_MS));

	/*
	 * The daemon it replaced wakes up and publishes its old entry again,
	 * racing the new one: nobody goes back to the old address.
	 */
	snprintf(stale, sizeof(stale), "%s %" PRIu64, listen[1], old);
	end = now_ms() + 2 * DEAD_MS;
	while (now_ms() < end) {
		mc_put(f, 1, stale);
		sleep_ms(2);
		for (b = 0; b < MAXN; b++)
			if (b != 1)
				assert_true(addr_is(f, b, 1, "10.0.1.2:7071"));
	}
	for (b = 0; b < MAXN; b++)
		if (b != 1)
			assert_true(heard_is(f, b, 1, "10.0.1.2:7071"));
}

/*
 * A daemon taken over by one started later (a hung one that woke up after
 * its replacement registered) stops registering: the registry keeps the
 * replacement's entry, and the old daemon's view says who took its place.
 */
static void test_taken_over(void **state)
{
	struct fx *f = *state;
	struct rnode *old = &f->node[MAXN - 1], *repl = &f->node[1];
	char want[128], got[128];
	struct memb_view v;
	uint64_t end;

	if (!f->net)
		skip();
	f->net2 = peer_fakenet_new(MAXN, 2);
	assert_non_null(f->net2);
	node_start(f, 0, MAXN, "10.0.0.1:7070");
	/* Node 1's first daemon, then (on the group's network) a later one. */
	node_start_on(f, MAXN - 1, 1, MAXN, "10.0.0.2:7070", f->net2);
	expect_entry_of(f, 1, old);
	node_start(f, 1, MAXN, "10.0.1.2:7071");
	assert_true(old->inc < repl->inc);

	assert_true(WAIT_FOR((memb_get_view(old->m, &v),
			      v.taken_over_by == repl->inc),
			     WAIT_MS));
	memb_get_view(repl->m, &v);
	assert_int_equal(v.taken_over_by, 0);
	/* From then on the entry is the replacement's, every time. */
	snprintf(want, sizeof(want), "%s %" PRIu64, repl->listen, repl->inc);
	end = now_ms() + 2 * DEAD_MS;
	while (now_ms() < end) {
		mc_entry(f, 1, got, sizeof(got));
		assert_string_equal(got, want);
		sleep_ms(HB_MS / 2);
	}
	assert_true(WAIT_FOR(addr_is(f, 0, 1, "10.0.1.2:7071"), WAIT_MS));
}

/*
 * Over real TCP with no address list at all: the nodes find each other
 * only through the registry, keep each other through its loss, and a node
 * started while it is down joins once it is back.
 */
static void test_registry_tcp(void **state)
{
	struct fx *f = *state;
	struct memb_view v;
	int i;

	if (!f->net)
		skip();
	for (i = 0; i < 3; i++)
		node_start_tcp(f, i, MAXN);
	assert_true(WAIT_FOR(all_up(f, 3), WAIT_MS));
	assert_true(all_know(f, 3));

	mc_kill(f);
	sleep_ms(3 * DEAD_MS);
	assert_true(WAIT_FOR(all_up(f, 3), WAIT_MS));
	assert_int_equal(dead_changes(f, 3), 0);

	/* Nobody can reach it, it can reach nobody. */
	node_start_tcp(f, 3, MAXN);
	sleep_ms(2 * DEAD_MS);
	for (i = 0; i < 3; i++) {
		memb_get_view(f->node[i].m, &v);
		assert_int_equal(v.node[3].state, MEMB_UNKNOWN);
		memb_get_view(f->node[3].m, &v);
		assert_int_equal(v.node[i].state, MEMB_UNKNOWN);
	}

	f->mc = mc_start(f->port);
	assert_true(f->mc > 0);
	assert_true(WAIT_FOR(all_up(f, MAXN), WAIT_MS));
	assert_true(WAIT_FOR(all_know(f, MAXN), WAIT_MS));
	assert_int_equal(dead_changes(f, 3), 0);

	/* A replacement on another port: found again. */
	node_stop(f, 1);
	node_start_tcp(f, 1, MAXN);
	assert_true(WAIT_FOR(all_up(f, MAXN), WAIT_MS));
	assert_true(WAIT_FOR(all_know(f, MAXN), WAIT_MS));
}

/*
 * A registry that accepts connections and never answers: heartbeats go on
 * and stop is prompt, each registry call bounded by its timeout.
 */
static void test_silent_registry(void **state)
{
	struct fx *f = *state;
	char listen[32];
	uint64_t t0;
	int i, port;

	if (!f->net)
		skip();
	f->silent_fd = listen_any(&port, 16);
	assert_true(f->silent_fd >= 0);
	snprintf(f->registry, sizeof(f->registry), "127.0.0.1:%d", port);
	for (i = 0; i < 3; i++) {
		snprintf(listen, sizeof(listen), "10.0.0.%d:7070", i + 1);
		node_start(f, i, MAXN, listen);
	}
	assert_true(WAIT_FOR(all_up(f, 3), WAIT_MS));
	sleep_ms(3 * DEAD_MS);
	assert_true(WAIT_FOR(all_up(f, 3), WAIT_MS));
	assert_int_equal(dead_changes(f, 3), 0);
	t0 = now_ms();
	for (i = 0; i < 3; i++)
		memb_stop(f->node[i].m);
	print_message("stop with a silent registry: %" PRIu64 " ms\n",
		      now_ms() - t0);
	assert_true(now_ms() - t0 < 3000);
}

static void test_registry_opts(void **state)
{
	struct fx *f = *state;
	struct peer_xport *x;
	struct memb *m = NULL;
	struct memb_opts o = {
		.self = 0, .nodes = MAXN, .incarnation = 1, .heartbeat_ms = 10,
		.suspect_ms = 50, .dead_ms = 100, .registry = "127.0.0.1:1",
		.group = "g", .listen_addr = "127.0.0.1:7070",
	};
	struct memb_opts b;
	const char *bad_reg[] = { "", "host", "host:", ":11211", "h:0",
				  "h:65536", "h:12a", "a:1,", "a:1,,b:2" };
	size_t i;

	if (!f->net)
		skip();
	assert_int_equal(peer_fake_new(f->net, 0, 1, &x), 0);
	for (i = 0; i < sizeof(bad_reg) / sizeof(bad_reg[0]); i++) {
		b = o;
		b.registry = bad_reg[i];
		assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	}
	b = o;
	b.group = NULL;
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b.group = "a/b";
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b.group = "a b";
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b = o;
	b.listen_addr = NULL;
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b.listen_addr = "a b:1";
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	assert_null(m);
	b = o;
	b.registry = "[::1]:11211,127.0.0.1:11212";
	assert_int_equal(memb_new(&b, x, &m), 0);
	peer_free(x);
	memb_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_registry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_taken_over, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_registry_tcp, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_silent_registry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_registry_opts, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
