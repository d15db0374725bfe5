/*
 * nslog_bench.c - the namespace log's latency: three nodes in one process,
 * as reftfsd runs them (raft_uv disk logs, raft over loopback TCP with our
 * handshake, forwarding over two-way authenticated peer_tcp links), with
 * the daemon's timing (heartbeat 100 ms, election 1000 ms).
 *
 * One entry at a time, first from the leader, then from a follower; each
 * submit starts at a random point of the heartbeat (a pause of 0 to one
 * heartbeat first), so that a latency tied to the heartbeat shows as it
 * would under sparse traffic, not at one phase of it.  Then the same back
 * to back: each submit as soon as the one before returned.  Per submit:
 *
 *   submit   nslog_submit()'s time: the entry committed and applied on
 *            the submitting node;
 *   all      until the last of the three nodes applied it (their fsm
 *            apply callbacks, timed as they run).
 *
 * Prints the median and the 90th percentile of each, in ms, and the rate
 * of the back-to-back submits.
 *
 * Usage: nslog_bench [submits [dir]] (default 40 per role, and /dev/shm
 * when writable, else $TMPDIR or /tmp: raft_uv syncs every append, so a
 * disk adds its sync latency to every figure).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "group_i.h"

#define NODES 3
#define HEARTBEAT_MS 100	/* nslog's defaults, the daemon's too */
#define MAX_SUBMITS 1000
#define SUBMIT_MS 10000

struct node {
	int self;
	struct peer_xport *x;
	struct nslog *l;
};

/* When each node applied each entry (by the entry's id). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static double applied_at[NODES][2 * MAX_SUBMITS + 64];

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleep_ms(double ms)
{
	struct timespec ts = { (time_t)(ms / 1000),
			       (long)((ms - 1000 * (time_t)(ms / 1000)) * 1e6) };

	nanosleep(&ts, NULL);
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "nslog_bench: %s: %s\n", what, strerror(-rc));
	exit(1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The state machine: an entry is its id (u32); apply times it. */
static int f_apply(void *ctx, uint64_t index, const void *buf, size_t len)
{
	struct node *n = ctx;
	uint32_t id;

	(void)index;
	if (len != sizeof(id))
		return -EINVAL;
	memcpy(&id, buf, sizeof(id));
	if (id >= sizeof(applied_at[0]) / sizeof(applied_at[0][0]))
		return -EINVAL;
	pthread_mutex_lock(&lock);
	applied_at[n->self][id] = now();
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	return 0;
}

static int f_snapshot(void *ctx, void **buf, size_t *len)
{
	(void)ctx;
	*len = 0;
	*buf = malloc(1);
	return *buf ? 0 : -ENOMEM;
}

static int f_restore(void *ctx, uint64_t index, const void *buf,
		     size_t len)
{
	(void)ctx;
	(void)index;
	(void)buf;
	(void)len;
	return 0;
}

/* A loopback port nobody listens on now. */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	if (fd < 0)
		die("socket", -errno);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		die("bind", -errno);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
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

static struct nslog_status status(struct node *n)
{
	struct nslog_status s;

	nslog_get_status(n->l, &s);
	return s;
}

/* The node every node names as leader, once they agree; -1 after 20 s. */
static int wait_leader(struct node *nodes)
{
	double until = now() + 20000;

	while (now() < until) {
		int leader = status(&nodes[0]).leader;
		bool same = leader >= 0;

		for (int i = 1; i < NODES && same; i++)
			same = status(&nodes[i]).leader == leader;
		if (same && status(&nodes[leader]).is_leader)
			return leader;
		sleep_ms(20);
	}
	return -1;
}

/* Wait until every node applied entry @id; the last apply's time. */
static double wait_all_applied(uint32_t id)
{
	double last = 0;
	bool all;

	pthread_mutex_lock(&lock);
	for (;;) {
		all = true;
		last = 0;
		for (int i = 0; i < NODES && all; i++) {
			all = applied_at[i][id] > 0;
			if (applied_at[i][id] > last)
				last = applied_at[i][id];
		}
		if (all)
			break;
		pthread_cond_wait(&cond, &lock);
	}
	pthread_mutex_unlock(&lock);
	return last;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double rnd01(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / (double)(1ull << 53);
}

static uint32_t next_id = 1;

/*
 * @count submits from @from, one at a time, and their figures.  @paced:
 * each after a random pause of up to a heartbeat, once the one before is
 * applied everywhere; else back to back (the next as soon as the last
 * returned, as one thread making files would), with the rate printed too.
 */
static void run_role(struct node *nodes, int from, int count, bool paced,
		     const char *role)
{
	double *sub = calloc((size_t)count, sizeof(double));
	double *all = calloc((size_t)count, sizeof(double));
	double *start = calloc((size_t)count, sizeof(double));
	uint32_t first = next_id;
	double t_begin = now(), t_end;
	int rc, result;

	if (!sub || !all || !start)
		die("calloc", -ENOMEM);
	for (int k = 0; k < count; k++) {
		uint32_t id = next_id++;

		if (paced)
			sleep_ms(rnd01() * HEARTBEAT_MS);
		start[k] = now();
		rc = nslog_submit(nodes[from].l, &id, sizeof(id), SUBMIT_MS,
				  &result);
		if (rc < 0)
			die("nslog_submit", rc);
		sub[k] = now() - start[k];
		if (paced)
			wait_all_applied(id);
	}
	t_end = now();
	for (int k = 0; k < count; k++)
		all[k] = wait_all_applied(first + (uint32_t)k) - start[k];
	qsort(sub, (size_t)count, sizeof(double), cmp_double);
	qsort(all, (size_t)count, sizeof(double), cmp_double);
	printf("%-21s (node %d)  submit median %6.2f ms  p90 %6.2f ms   "
	       "all 3 applied median %6.2f ms  p90 %6.2f ms",
	       role, from, sub[count / 2], sub[count * 9 / 10],
	       all[count / 2], all[count * 9 / 10]);
	if (!paced)
		printf("   %.0f submits/s", count / ((t_end - t_begin) / 1e3));
	printf("\n");
	free(sub);
	free(all);
	free(start);
}

int main(int argc, char **argv)
{
	int count = argc > 1 ? atoi(argv[1]) : 40;
	const char *tmp = argc > 2 ? argv[2] : NULL;
	char base[512], dirs[NODES][600];
	char raft_buf[NODES][64], peer_buf[NODES][64];
	const char *raft_addrs[NODES], *peer_addrs[NODES];
	struct node nodes[NODES];
	struct grp_secret secret = { .len = 32 };
	int leader, rc;

	if (count < 1 || count > MAX_SUBMITS) {
		fprintf(stderr, "usage: nslog_bench [submits (1..%d) [dir]]\n",
			MAX_SUBMITS);
		return 2;
	}
	if (!tmp)
		tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" :
		      getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(base, sizeof(base), "%s/nslog_bench.XXXXXX", tmp);
	if (!mkdtemp(base))
		die("mkdtemp", -errno);
	memset(secret.key, 'k', secret.len);
	for (int i = 0; i < NODES; i++) {
		snprintf(raft_buf[i], sizeof(raft_buf[i]), "127.0.0.1:%d",
			 free_port());
		snprintf(peer_buf[i], sizeof(peer_buf[i]), "127.0.0.1:%d",
			 free_port());
		snprintf(dirs[i], sizeof(dirs[i]), "%s/n%d", base, i);
		raft_addrs[i] = raft_buf[i];
		peer_addrs[i] = peer_buf[i];
	}
	for (int i = 0; i < NODES; i++) {
		struct peer_tcp_opts to = {
			.self = i,
			.nodes = NODES,
			.incarnation = (uint64_t)i + 1,
			.group = "bench",
			.addrs = peer_addrs,
			.secret = &secret,
			.handshake_ms = 2000,
			.idle_ms = 2000,
		};
		struct nslog_opts o = {
			.self = i,
			.nodes = NODES,
			.incarnation = (uint64_t)i + 1,
			.addrs = raft_addrs,
			.dir = dirs[i],
			.secret = &secret,
			.group = "bench",
		};
		struct nslog_fsm fsm = {
			.ctx = &nodes[i],
			.apply = f_apply,
			.snapshot = f_snapshot,
			.restore = f_restore,
		};

		nodes[i].self = i;
		rc = peer_tcp_new(&to, &nodes[i].x);
		if (rc < 0)
			die("peer_tcp_new", rc);
		o.x = nodes[i].x;
		rc = nslog_new(&o, &fsm, &nodes[i].l);
		if (rc < 0)
			die("nslog_new", rc);
		rc = peer_start(nodes[i].x);
		if (rc < 0)
			die("peer_start", rc);
		rc = nslog_start(nodes[i].l);
		if (rc < 0)
			die("nslog_start", rc);
	}
	leader = wait_leader(nodes);
	if (leader < 0)
		die("no leader", -ETIMEDOUT);
	printf("nslog_bench: 3 nodes on loopback, state in %s, heartbeat "
	       "%d ms, %d submits per role\n", base, HEARTBEAT_MS, count);
	/* Warm up: links made, followers in raft's pipeline mode. */
	for (int k = 0; k < 5; k++) {
		uint32_t id = next_id++;
		int result;

		rc = nslog_submit(nodes[(leader + k) % NODES].l, &id,
				  sizeof(id), SUBMIT_MS, &result);
		if (rc < 0)
			die("nslog_submit (warm-up)", rc);
		wait_all_applied(id);
	}
	run_role(nodes, leader, count, true, "leader");
	run_role(nodes, (leader + 1) % NODES, count, true, "follower");
	run_role(nodes, leader, count, false, "leader, back to back");
	run_role(nodes, (leader + 1) % NODES, count, false,
		 "follower, back to back");
	if (wait_leader(nodes) != leader)
		printf("nslog_bench: the leader changed during the run: "
		       "the figures mix roles\n");
	for (int i = 0; i < NODES; i++)
		nslog_stop(nodes[i].l);
	for (int i = 0; i < NODES; i++) {
		peer_free(nodes[i].x);
		nslog_free(nodes[i].l);
	}
	rm_rf(base);
	return 0;
}
