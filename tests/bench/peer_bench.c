/*
 * peer_bench.c - the TCP peer transport against a plain TCP stream of the
 * same bytes, side by side in one run, on loopback, in one process:
 *
 *   plain  one thread write()s 1 MiB at a time into a TCP socket, another
 *          read()s them into one reused 1 MiB buffer (TCP_NODELAY, like
 *          the transport's sockets; it helps the stream too);
 *   peer   two peer_tcp transports: 1 MiB-bulk frames (peer_send), each
 *          received straight into one reused 1 MiB buffer given by the
 *          module's bulk_dest, its CRC32C checked by the transport.
 *
 * Each round moves 2 GiB over a connection made and warmed up before the
 * first round (both); rounds alternate plain, peer, plain, ... so drift
 * and foreign load hit both alike; the median round of each counts.
 * Prints GB/s (1e9 B/s) and peer/plain; the target is >= 0.8.
 *
 * Usage: peer_bench [GiB_per_round [rounds]] (default 2 3).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "erasure.h"
#include "group_i.h"

#define CHUNK ((size_t)1 << 20)
#define T_BENCH 200

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* --- plain ---------------------------------------------------------------- */

/*
 * One connection for every round, made and warmed up before the first,
 * as the transport's is: both are measured at their steady state.
 */
struct plain {
	int wfd, rfd;
	size_t total;		/* this round's */
	int rc;
};

static void *plain_reader(void *arg)
{
	struct plain *pl = arg;
	uint8_t *buf = malloc(CHUNK);
	size_t got = 0;
	ssize_t n;

	while (buf && got < pl->total) {
		n = read(pl->rfd, buf, CHUNK);
		if (n <= 0) {
			pl->rc = -1;
			break;
		}
		got += (size_t)n;
	}
	if (!buf)
		pl->rc = -1;
	free(buf);
	return NULL;
}

static void plain_open(struct plain *pl)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(lfd, 1) || getsockname(lfd, (struct sockaddr *)&sa, &sl))
		die("plain listen");
	pl->wfd = socket(AF_INET, SOCK_STREAM, 0);
	if (pl->wfd < 0 ||
	    connect(pl->wfd, (struct sockaddr *)&sa, sizeof(sa)))
		die("plain connect");
	pl->rfd = accept(lfd, NULL, NULL);
	if (pl->rfd < 0)
		die("plain accept");
	close(lfd);
	/* The transport's socket option, which helps the stream too. */
	setsockopt(pl->wfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(pl->rfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static double plain_round(struct plain *pl, const uint8_t *src, size_t total)
{
	pthread_t th;
	size_t sent = 0, off;
	double t0, t1;
	ssize_t n;

	pl->total = total;
	pl->rc = 0;
	if (pthread_create(&th, NULL, plain_reader, pl))
		die("pthread_create");
	t0 = now();
	while (sent < total) {
		for (off = 0; off < CHUNK;) {
			n = write(pl->wfd, src + off, CHUNK - off);
			if (n <= 0)
				die("plain write");
			off += (size_t)n;
		}
		sent += CHUNK;
	}
	pthread_join(th, NULL);
	t1 = now();
	if (pl->rc)
		die("plain read");
	return (double)total / (t1 - t0) / 1e9;
}

/* --- peer ----------------------------------------------------------------- */

struct sink {
	uint8_t *buf;		/* the one reused receive buffer */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t bytes, bad;
};

static void *sink_dest(void *ctx, int node, const struct peer_frame *f,
		       void **cookie)
{
	struct sink *s = ctx;

	return f->bulk_len <= CHUNK ? s->buf : NULL;
}

static int sink_deliver(void *ctx, int node, const struct peer_frame *f,
			void *cookie, int bulk_rc)
{
	struct sink *s = ctx;

	pthread_mutex_lock(&s->lock);
	if (bulk_rc != 0 || f->bulk != s->buf)
		s->bad++;
	s->bytes += f->bulk_len;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static double peer_round(struct peer_xport *tx, struct sink *s,
			 const uint8_t *src, uint32_t crc, size_t total)
{
	uint8_t meta[16] = { 0 };
	struct peer_frame f = {
		.type = T_BENCH,
		.meta = meta,
		.meta_len = sizeof(meta),
		.bulk = src,
		.bulk_len = CHUNK,
		.bulk_crc = crc,
	};
	uint64_t start;
	size_t sent;
	double t0, t1;
	int rc;

	pthread_mutex_lock(&s->lock);
	start = s->bytes;
	pthread_mutex_unlock(&s->lock);
	t0 = now();
	for (sent = 0; sent < total; sent += CHUNK) {
		rc = peer_send(tx, 1, &f, 30000);
		if (rc) {
			fprintf(stderr, "peer_send: %s\n", strerror(-rc));
			exit(1);
		}
	}
	pthread_mutex_lock(&s->lock);
	while (s->bytes - start < total)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	t1 = now();
	return (double)total / (t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
	size_t total = (size_t)((argc > 1 ? atof(argv[1]) : 2.0) * (1u << 30));
	int rounds = argc > 2 ? atoi(argv[2]) : 3, i, rc;
	struct grp_secret secret = { .len = 32 };
	struct sink s = { 0 };
	struct plain pl = { 0 };
	struct peer_xport *x[2];
	struct peer_rx rx = {
		.ctx = &s,
		.bulk_dest = sink_dest,
		.deliver = sink_deliver,
	};
	double *plain, *peer, mp, mq;
	uint8_t *src;
	uint32_t crc;
	char addr[64];

	total -= total % CHUNK;
	if (total == 0 || rounds < 1) {
		fprintf(stderr, "usage: peer_bench [GiB_per_round [rounds]]\n");
		return 2;
	}
	src = malloc(CHUNK);
	s.buf = malloc(CHUNK);
	plain = calloc((size_t)rounds, sizeof(*plain));
	peer = calloc((size_t)rounds, sizeof(*peer));
	if (!src || !s.buf || !plain || !peer)
		die("malloc");
	for (i = 0; i < (int)CHUNK; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 12));
	crc = ers_crc32c(0, src, CHUNK);
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.cond, NULL);
	if (grp_random(secret.key, secret.len))
		die("grp_random");

	for (i = 0; i < 2; i++) {
		struct peer_tcp_opts o = {
			.self = i,
			.nodes = 2,
			.incarnation = (uint64_t)i + 1,
			.group = "bench",
			.listen = "127.0.0.1:0",
			.secret = &secret,
			.handshake_ms = 5000,
			.idle_ms = 30000,
		};

		rc = peer_tcp_new(&o, &x[i]);
		if (rc == 0 && i == 1)
			rc = peer_register(x[i], T_BENCH, T_BENCH, &rx);
		if (rc == 0)
			rc = peer_start(x[i]);
		if (rc) {
			fprintf(stderr, "transport: %s\n", strerror(-rc));
			return 1;
		}
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", peer_tcp_port(x[1]));
	if (peer_set_addr(x[0], 1, addr))
		die("peer_set_addr");
	/* Connections, handshake and buffers' first touch: not timed. */
	plain_open(&pl);
	peer_round(x[0], &s, src, crc, 256 * CHUNK);
	plain_round(&pl, src, 256 * CHUNK);

	printf("peer_bench: %zu MiB per round, %d rounds each, 1 MiB "
	       "writes/frames, loopback\n", total >> 20, rounds);
	for (i = 0; i < rounds; i++) {
		plain[i] = plain_round(&pl, src, total);
		peer[i] = peer_round(x[0], &s, src, crc, total);
		printf("  round %d: plain %.2f GB/s, peer %.2f GB/s\n", i + 1,
		       plain[i], peer[i]);
		fflush(stdout);
	}
	qsort(plain, (size_t)rounds, sizeof(*plain), cmp_double);
	qsort(peer, (size_t)rounds, sizeof(*peer), cmp_double);
	mp = plain[rounds / 2];
	mq = peer[rounds / 2];
	printf("%-28s %8.2f GB/s\n", "plain TCP stream (median)", mp);
	printf("%-28s %8.2f GB/s\n", "peer_tcp frames (median)", mq);
	printf("%-28s %8.2f   (target >= 0.80)\n", "peer/plain", mq / mp);
	if (s.bad) {
		fprintf(stderr, "peer_bench: %llu frames arrived wrong\n",
			(unsigned long long)s.bad);
		return 1;
	}
	peer_free(x[0]);
	peer_free(x[1]);
	close(pl.wfd);
	close(pl.rfd);
	free(src);
	free(s.buf);
	free(plain);
	free(peer);
	return 0;
}
