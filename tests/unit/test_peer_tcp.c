/*
 * test_peer_tcp.c - the TCP peer transport (engine/group/peer_tcp.c) on
 * loopback: real sockets, a real secret file, three transports in one
 * process, and a raw-socket client that speaks (and breaks) the protocol.
 *
 * cmocka's asserts jump, so they run on the test's own thread only; what
 * the transport threads see (handlers) is recorded and checked there.
 *
 * PEER_FUZZ_SEED=<n> replays the fuzz case; PEER_FUZZ_ITERS=<n> sets its
 * length.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <dirent.h>

#include "erasure.h"
#include "group_i.h"

#define NODES 3
#define THREADS 3

#define T_STREAM 128	/* ordered frames, checked byte for byte */
#define T_ECHO 129	/* replies with the request's meta and bulk */
#define T_ERR 130	/* replies -ENOENT */
#define T_NOREPLY 131	/* never replies */
#define T_FUZZ 140	/* counted only */
#define T_UNKNOWN 70	/* a type nobody registered */

#define GROUP "test-group"
#define MAXBULK (3u << 20)

static const char secret_text[] = "0123456789abcdef-test-secret";
static const char other_text[] = "0123456789abcdef-not-the-same";

/* --- time, random -------------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return mix(*s);
}

/* The bytes of frame @key: the same on both sides, different per frame. */
static void pattern(uint8_t *p, size_t len, uint64_t key)
{
	uint64_t w = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		if (i % 8 == 0)
			w = mix(key + i);
		p[i] = (uint8_t)(w >> (8 * (i % 8)));
	}
}

static bool pattern_ok(const uint8_t *p, size_t len, uint64_t key)
{
	uint64_t w = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		if (i % 8 == 0)
			w = mix(key + i);
		if (p[i] != (uint8_t)(w >> (8 * (i % 8))))
			return false;
	}
	return true;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* --- secret files --------------------------------------------------------- */

static char *secret_file(const char *text, mode_t mode)
{
	char *path = malloc(256);
	int fd;

	assert_non_null(path);
	snprintf(path, 256, "%s/peer_tcp_secret.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : P_tmpdir);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(write(fd, "\n", 1), 1);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	return path;
}

static void load_secret(const char *text, struct grp_secret *s)
{
	char *path = secret_file(text, 0600);

	assert_int_equal(grp_secret_load(path, s), 0);
	assert_int_equal(s->len, strlen(text)); /* the newline is dropped */
	unlink(path);
	free(path);
}

static void test_secret_file(void **state)
{
	struct grp_secret s;
	char *path;

	(void)state;
	path = secret_file(secret_text, 0644);
	assert_int_equal(grp_secret_load(path, &s), -EPERM);
	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(grp_secret_load(path, &s), -EPERM);
	assert_int_equal(chmod(path, 0400), 0);
	assert_int_equal(grp_secret_load(path, &s), 0);
	unlink(path);
	free(path);

	path = secret_file("too-short", 0600);
	assert_int_equal(grp_secret_load(path, &s), -EINVAL);
	unlink(path);
	free(path);
}

/* --- a test module on each node ------------------------------------------- */

struct node {
	struct peer_xport *x;
	int id;
	uint64_t inc;
	pthread_mutex_t lock;
	/* T_STREAM: the next sequence number per (sender, thread) */
	uint64_t next[NODES][THREADS];
	uint64_t stream_got;
	uint64_t errors;	/* anything a handler found wrong */
	uint8_t *dest[NODES];	/* bulk_dest buffers, one per sender */
	uint64_t outstanding;	/* bulk_dest buffers not yet delivered */
	uint64_t delivered[NODES];
	uint64_t noreply_got;
	uint64_t fuzz_got, fuzz_badcrc, fuzz_reset;
	struct {
		int node;
		uint64_t inc;
		bool up;
	} ev[64];
	int nev;
};

static void note_error(struct node *n, const char *what, int src)
{
	fprintf(stderr, "node %d from %d: %s\n", n->id, src, what);
	n->errors++;
}

static void *mod_bulk_dest(void *ctx, int src, const struct peer_frame *f,
			   void **cookie)
{
	struct node *n = ctx;
	void *dst = NULL;

	pthread_mutex_lock(&n->lock);
	/* Every other frame into the module's buffer, the rest into the
	 * transport's: both paths are exercised. */
	if (f->bulk_len <= MAXBULK && (f->rid & 1) == 0 && src < NODES) {
		dst = n->dest[src];
		n->outstanding++;
		*cookie = dst;
	}
	pthread_mutex_unlock(&n->lock);
	return dst;
}

static void check_stream(struct node *n, int src, const struct peer_frame *f,
			 void *cookie, int bulk_rc)
{
	const uint8_t *m = f->meta;
	uint32_t th, mlen;
	uint64_t seq, key;

	if (f->meta_len < 24) {
		note_error(n, "short meta", src);
		return;
	}
	th = get32(m + 4);
	seq = get64(m + 8);
	mlen = get32(m + 16);
	if (get32(m) != (uint32_t)src || th >= THREADS ||
	    mlen != f->meta_len) {
		note_error(n, "meta names the wrong sender", src);
		return;
	}
	if (seq != n->next[src][th]) {
		fprintf(stderr, "seq %llu, want %llu\n",
			(unsigned long long)seq,
			(unsigned long long)n->next[src][th]);
		note_error(n, "out of order", src);
	}
	n->next[src][th] = seq + 1;
	key = ((uint64_t)src << 48) ^ ((uint64_t)th << 40) ^ seq;
	if (!pattern_ok(m + 24, f->meta_len - 24, ~key))
		note_error(n, "meta bytes", src);
	if (bulk_rc != 0)
		note_error(n, "bulk CRC", src);
	if (cookie && f->bulk != cookie)
		note_error(n, "bulk not where bulk_dest said", src);
	if (f->bulk_len && !pattern_ok(f->bulk, f->bulk_len, key))
		note_error(n, "bulk bytes", src);
	if (f->bulk_len && f->bulk_crc != ers_crc32c(0, f->bulk, f->bulk_len))
		note_error(n, "bulk_crc", src);
	n->stream_got++;
}

static int mod_deliver(void *ctx, int src, const struct peer_frame *f,
		       void *cookie, int bulk_rc)
{
	struct node *n = ctx;
	struct peer_frame rep = { 0 };
	int rc = 0;

	pthread_mutex_lock(&n->lock);
	if (cookie)
		n->outstanding--;
	if (bulk_rc == -ECONNRESET) {
		n->fuzz_reset++;
		pthread_mutex_unlock(&n->lock);
		return 0;
	}
	if (src >= 0 && src < NODES)
		n->delivered[src]++;
	switch (f->type) {
	case T_STREAM:
		check_stream(n, src, f, cookie, bulk_rc);
		break;
	case T_NOREPLY:
		n->noreply_got++;
		break;
	case T_FUZZ:
		n->fuzz_got++;
		if (bulk_rc == -EBADMSG)
			n->fuzz_badcrc++;
		break;
	case T_ECHO:
	case T_ERR:
		break;
	default:
		rc = -EPROTO;
	}
	pthread_mutex_unlock(&n->lock);

	/*
	 * Replies are small or go straight from f->bulk: sent inline, which
	 * a real module would hand to a worker instead.
	 */
	if (f->type == T_ECHO) {
		rep.type = T_ECHO;
		rep.meta = f->meta;
		rep.meta_len = f->meta_len;
		rep.bulk = f->bulk;
		rep.bulk_len = f->bulk_len;
		rep.bulk_crc = f->bulk_crc;
		if (peer_reply(n->x, src, f, &rep, 5000) < 0) {
			pthread_mutex_lock(&n->lock);
			note_error(n, "echo reply failed", src);
			pthread_mutex_unlock(&n->lock);
		}
	} else if (f->type == T_ERR) {
		peer_reply_err(n->x, src, f, -ENOENT, 5000);
	}
	return rc;
}

static void mod_link(void *ctx, int node, uint64_t inc, bool up)
{
	struct node *n = ctx;

	pthread_mutex_lock(&n->lock);
	if (n->nev < (int)(sizeof(n->ev) / sizeof(n->ev[0]))) {
		n->ev[n->nev].node = node;
		n->ev[n->nev].inc = inc;
		n->ev[n->nev].up = up;
		n->nev++;
	}
	pthread_mutex_unlock(&n->lock);
}

struct opts {
	int nodes;
	const char *group;
	const struct grp_secret *secret;
	int handshake_ms, idle_ms;
	const char *listen;
};

static struct node *node_new(int id, uint64_t inc, const struct opts *o)
{
	struct node *n = calloc(1, sizeof(*n));
	struct peer_tcp_opts to = {
		.self = id,
		.nodes = o->nodes,
		.incarnation = inc,
		.group = o->group ? o->group : GROUP,
		.listen = o->listen ? o->listen : "127.0.0.1:0",
		.secret = o->secret,
		.handshake_ms = o->handshake_ms ? o->handshake_ms : 3000,
		.idle_ms = o->idle_ms ? o->idle_ms : 10000,
	};
	struct peer_rx rx = {
		.ctx = n,
		.bulk_dest = mod_bulk_dest,
		.deliver = mod_deliver,
		.link = mod_link,
	};
	int i;

	assert_non_null(n);
	n->id = id;
	n->inc = inc;
	pthread_mutex_init(&n->lock, NULL);
	for (i = 0; i < NODES; i++) {
		n->dest[i] = malloc(MAXBULK);
		assert_non_null(n->dest[i]);
	}
	assert_int_equal(peer_tcp_new(&to, &n->x), 0);
	/* Bound by peer_tcp_new already: a taken port fails there. */
	assert_true(peer_tcp_port(n->x) > 0);
	assert_int_equal(peer_register(n->x, PEER_T_TEST_FIRST,
				       PEER_T_TEST_LAST, &rx), 0);
	assert_int_equal(peer_start(n->x), 0);
	assert_true(peer_tcp_port(n->x) > 0);
	return n;
}

static void node_free(struct node *n)
{
	int i;

	if (!n)
		return;
	peer_free(n->x);
	for (i = 0; i < NODES; i++)
		free(n->dest[i]);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

static void set_addr(struct node *from, struct node *to)
{
	char addr[64];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", peer_tcp_port(to->x));
	assert_int_equal(peer_set_addr(from->x, to->id, addr), 0);
}

static void connect_all(struct node **n, int cnt)
{
	int i, j;

	for (i = 0; i < cnt; i++)
		for (j = 0; j < cnt; j++)
			if (i != j && n[i] && n[j])
				set_addr(n[i], n[j]);
}

static uint64_t get_u64(struct node *n, const uint64_t *field)
{
	uint64_t v;

	pthread_mutex_lock(&n->lock);
	v = *field;
	pthread_mutex_unlock(&n->lock);
	return v;
}

/* Wait (at most @ms) until *@field of @n is at least @want. */
static bool wait_u64(struct node *n, const uint64_t *field, uint64_t want,
		     int ms)
{
	int64_t end = now_ms() + ms;

	while (get_u64(n, field) < want) {
		if (now_ms() > end)
			return false;
		sleep_ms(2);
	}
	return true;
}

static struct peer_stats stats(struct node *n, int node)
{
	struct peer_stats s;

	peer_stats(n->x, node, &s);
	return s;
}

static struct grp_secret secret, other_secret;

static int group_setup(void **state)
{
	(void)state;
	load_secret(secret_text, &secret);
	load_secret(other_text, &other_secret);
	return 0;
}

/* --- streams between every pair ------------------------------------------- */

struct sender {
	struct node **n;
	int self, th, frames;
	int fails;
};

static uint32_t pick_bulk(uint64_t *s)
{
	static const uint32_t sizes[] = { 0, 1, 7, 512, 4095, 4096, 65535,
					  65536, 65537, 200000 };
	uint64_t r = rnd(s) % 100;

	if (r < 2)
		return MAXBULK - (uint32_t)(rnd(s) % 3);
	if (r < 8)
		return (1u << 20) + (uint32_t)(rnd(s) % 4096);
	return sizes[rnd(s) % (sizeof(sizes) / sizeof(sizes[0]))];
}

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	uint8_t *meta = malloc(PEER_META_MAX), *bulk = malloc(MAXBULK);
	uint64_t seq[NODES] = { 0 };
	uint64_t rs = (uint64_t)s->self * 77 + (uint64_t)s->th;
	int i, dst, k = 0;

	for (i = 0; i < s->frames; i++) {
		struct peer_frame f = { .type = T_STREAM };
		uint64_t key, r;
		uint32_t mlen;

		dst = (s->self + 1 + k++ % (NODES - 1)) % NODES;
		r = rnd(&rs) % 100;
		if (r < 3)
			mlen = PEER_META_MAX;
		else if (r < 10)
			mlen = 24 + (uint32_t)(rnd(&rs) % 20000);
		else
			mlen = 24 + (uint32_t)(rnd(&rs) % 64);
		key = ((uint64_t)s->self << 48) ^ ((uint64_t)s->th << 40) ^
		      seq[dst];
		put32(meta, (uint32_t)s->self);
		put32(meta + 4, (uint32_t)s->th);
		put64(meta + 8, seq[dst]);
		put32(meta + 16, mlen);
		put32(meta + 20, 0);
		pattern(meta + 24, mlen - 24, ~key);
		f.meta = meta;
		f.meta_len = mlen;
		f.bulk_len = pick_bulk(&rs);
		f.bulk = bulk;
		pattern(bulk, f.bulk_len, key);
		f.bulk_crc = ers_crc32c(0, bulk, f.bulk_len);
		f.rid = rnd(&rs);
		if (peer_send(s->n[s->self]->x, dst, &f, 20000) != 0)
			s->fails++;
		seq[dst]++;
	}
	free(meta);
	free(bulk);
	return NULL;
}

static void test_streams(void **state)
{
	struct opts o = { .nodes = NODES, .secret = &secret };
	struct node *n[NODES];
	struct sender s[NODES][THREADS];
	pthread_t th[NODES][THREADS];
	uint64_t want;
	int i, j, frames = 120;

	(void)state;
	for (i = 0; i < NODES; i++)
		n[i] = node_new(i, 1000 + (uint64_t)i, &o);
	connect_all(n, NODES);
	for (i = 0; i < NODES; i++)
		for (j = 0; j < THREADS; j++) {
			s[i][j] = (struct sender){ .n = n, .self = i, .th = j,
						   .frames = frames };
			assert_int_equal(pthread_create(&th[i][j], NULL,
							sender_main, &s[i][j]),
					 0);
		}
	for (i = 0; i < NODES; i++)
		for (j = 0; j < THREADS; j++) {
			pthread_join(th[i][j], NULL);
			assert_int_equal(s[i][j].fails, 0);
		}
	/* Every node receives half of every other node's frames. */
	want = (uint64_t)(NODES - 1) * THREADS * frames / (NODES - 1);
	for (i = 0; i < NODES; i++) {
		assert_true(wait_u64(n[i], &n[i]->stream_got, want, 30000));
		assert_int_equal(get_u64(n[i], &n[i]->errors), 0);
		assert_int_equal(get_u64(n[i], &n[i]->outstanding), 0);
		for (j = 0; j < NODES; j++) {
			struct peer_stats st = stats(n[i], j);

			if (j == i)
				continue;
			assert_true(st.up);
			assert_int_equal(st.incarnation, 1000 + (uint64_t)j);
			assert_int_equal(st.connects, 1);
			assert_int_equal(st.bad_frames, 0);
			assert_int_equal(st.crc_errors, 0);
			assert_int_equal(st.auth_failed, 0);
			assert_int_equal(st.frames_out, THREADS * frames / 2);
			assert_int_equal(st.frames_in, THREADS * frames / 2);
		}
	}
	for (i = 0; i < NODES; i++)
		node_free(n[i]);
}

/* --- calls ---------------------------------------------------------------- */

static void test_calls(void **state)
{
	struct opts o = { .nodes = NODES, .secret = &secret };
	struct node *n[NODES] = { 0 };
	uint8_t *req_bulk = malloc(MAXBULK), *rep_bulk = malloc(MAXBULK);
	uint8_t meta[100], rmeta[200];
	struct peer_frame req;
	struct peer_reply rep;
	int i, rc;
	int64_t t0;

	(void)state;
	for (i = 0; i < 2; i++)
		n[i] = node_new(i, 7 + (uint64_t)i, &o);
	connect_all(n, 2);

	pattern(meta, sizeof(meta), 5);
	for (i = 0; i < 4; i++) {
		static const uint32_t lens[] = { 0, 1, 65536, MAXBULK };
		uint32_t len = lens[i];

		pattern(req_bulk, len, 100 + (uint64_t)i);
		memset(rep_bulk, 0, MAXBULK);
		req = (struct peer_frame){
			.type = T_ECHO,
			.meta = meta,
			.meta_len = sizeof(meta),
			.bulk = req_bulk,
			.bulk_len = len,
			.bulk_crc = ers_crc32c(0, req_bulk, len),
		};
		rep = (struct peer_reply){
			.meta = rmeta,
			.meta_cap = sizeof(rmeta),
			.bulk = rep_bulk,
			.bulk_cap = MAXBULK,
		};
		assert_int_equal(peer_call(n[0]->x, 1, &req, &rep, 10000), 0);
		assert_int_equal(rep.type, T_ECHO);
		assert_int_equal(rep.meta_len, sizeof(meta));
		assert_memory_equal(rmeta, meta, sizeof(meta));
		assert_int_equal(rep.bulk_len, len);
		assert_int_equal(rep.bulk_crc, req.bulk_crc);
		/*
		 * rep_bulk was zeroed and peer.c copies no bulk: these bytes
		 * can only be there because the transport read them there.
		 */
		assert_true(pattern_ok(rep_bulk, len, 100 + (uint64_t)i));
	}

	/* A reply bigger than the caller's buffer: -EMSGSIZE. */
	req.bulk_len = 4096;
	req.bulk_crc = ers_crc32c(0, req_bulk, 4096);
	rep.bulk_cap = 4095;
	assert_int_equal(peer_call(n[0]->x, 1, &req, &rep, 10000), -EMSGSIZE);
	rep.bulk_cap = MAXBULK;
	rep.meta_cap = 10;
	assert_int_equal(peer_call(n[0]->x, 1, &req, &rep, 10000), -EMSGSIZE);
	rep.meta_cap = sizeof(rmeta);

	/* The peer's error. */
	req = (struct peer_frame){ .type = T_ERR };
	assert_int_equal(peer_call(n[0]->x, 1, &req, &rep, 10000), -ENOENT);

	/* No reply: the caller's time runs out. */
	req = (struct peer_frame){ .type = T_NOREPLY };
	t0 = now_ms();
	assert_int_equal(peer_call(n[0]->x, 1, &req, &rep, 300), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 290);
	assert_int_equal(stats(n[0], 1).call_timeouts, 1);

	/* And both ways. */
	req = (struct peer_frame){ .type = T_ECHO, .meta = meta,
				   .meta_len = 10 };
	rc = peer_call(n[1]->x, 0, &req, &rep, 10000);
	assert_int_equal(rc, 0);
	assert_int_equal(get_u64(n[0], &n[0]->errors), 0);
	assert_int_equal(get_u64(n[1], &n[1]->errors), 0);
	for (i = 0; i < 2; i++)
		node_free(n[i]);
	free(req_bulk);
	free(rep_bulk);
}

struct caller {
	struct node *n;
	int to, rc, timeout_ms;
	int64_t took_ms;
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	struct peer_frame req = { .type = T_NOREPLY };
	uint8_t buf[16];
	struct peer_reply rep = { .meta = buf, .meta_cap = sizeof(buf) };
	int64_t t0 = now_ms();

	c->rc = peer_call(c->n->x, c->to, &req, &rep, c->timeout_ms);
	c->took_ms = now_ms() - t0;
	return NULL;
}

/* The callee's transport stops during a call: -ECONNRESET, at once. */
static void test_call_reset(void **state)
{
	struct opts o = { .nodes = NODES, .secret = &secret };
	struct node *n[2];
	struct caller c;
	pthread_t th;

	(void)state;
	n[0] = node_new(0, 1, &o);
	n[1] = node_new(1, 2, &o);
	connect_all(n, 2);
	c = (struct caller){ .n = n[0], .to = 1, .timeout_ms = 20000 };
	assert_int_equal(pthread_create(&th, NULL, caller_main, &c), 0);
	assert_true(wait_u64(n[1], &n[1]->noreply_got, 1, 10000));
	peer_stop(n[1]->x);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, -ECONNRESET);
	assert_true(c.took_ms < 15000);
	assert_false(stats(n[0], 1).up);
	node_free(n[1]);
	node_free(n[0]);
}

/* --- links come back ------------------------------------------------------ */

static int count_ev(struct node *n, int node, uint64_t inc, bool up)
{
	int i, k = 0;

	pthread_mutex_lock(&n->lock);
	for (i = 0; i < n->nev; i++)
		if (n->ev[i].node == node && n->ev[i].inc == inc &&
		    n->ev[i].up == up)
			k++;
	pthread_mutex_unlock(&n->lock);
	return k;
}

static bool wait_ev(struct node *n, int node, uint64_t inc, bool up, int k)
{
	int64_t end = now_ms() + 10000;

	while (count_ev(n, node, inc, up) < k) {
		if (now_ms() > end)
			return false;
		sleep_ms(2);
	}
	return true;
}

static int send_small(struct node *from, int to, uint64_t seq, int th)
{
	uint8_t meta[24];
	struct peer_frame f = { .type = T_STREAM, .meta = meta,
				.meta_len = sizeof(meta), .rid = 1 };

	put32(meta, (uint32_t)from->id);
	put32(meta + 4, (uint32_t)th);
	put64(meta + 8, seq);
	put32(meta + 16, sizeof(meta));
	put32(meta + 20, 0);
	return peer_send(from->x, to, &f, 5000);
}

static void test_reconnect(void **state)
{
	struct opts o = { .nodes = NODES, .secret = &secret };
	struct node *n[2];
	char listen[64];
	int port;

	(void)state;
	n[0] = node_new(0, 10, &o);
	n[1] = node_new(1, 20, &o);
	connect_all(n, 2);

	assert_int_equal(send_small(n[0], 1, 0, 0), 0);
	assert_true(wait_ev(n[0], 1, 20, true, 1));

	/* Dropped, and made again at the next send. */
	peer_drop(n[0]->x, 1);
	assert_true(wait_ev(n[0], 1, 20, false, 1));
	assert_false(stats(n[0], 1).up);
	assert_int_equal(send_small(n[0], 1, 1, 0), 0);
	assert_true(wait_ev(n[0], 1, 20, true, 2));
	assert_int_equal(stats(n[0], 1).connects, 2);
	assert_true(wait_u64(n[1], &n[1]->stream_got, 2, 10000));

	/* The peer restarts on the same port with a new incarnation. */
	port = peer_tcp_port(n[1]->x);
	node_free(n[1]);
	/* Its sockets closed: the link goes down without any send. */
	assert_true(wait_ev(n[0], 1, 20, false, 2));
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	o.listen = listen;
	n[1] = node_new(1, 21, &o);
	o.listen = NULL;
	set_addr(n[1], n[0]);
	assert_int_equal(send_small(n[0], 1, 0, 0), 0);
	assert_true(wait_ev(n[0], 1, 21, true, 1));
	assert_int_equal(stats(n[0], 1).incarnation, 21);
	assert_true(wait_u64(n[1], &n[1]->stream_got, 1, 10000));
	/* And the other way, into n[0]'s incoming side. */
	assert_int_equal(send_small(n[1], 0, 0, 1), 0);
	assert_true(wait_u64(n[0], &n[0]->stream_got, 1, 10000));
	assert_int_equal(get_u64(n[0], &n[0]->errors), 0);
	assert_int_equal(get_u64(n[1], &n[1]->errors), 0);
	assert_int_equal(stats(n[0], 1).bad_frames, 0);

	/* A peer that is not there: -ENOTCONN, quickly, no link. */
	node_free(n[1]);
	assert_true(wait_ev(n[0], 1, 21, false, 1));
	assert_int_equal(send_small(n[0], 1, 1, 0), -ENOTCONN);
	node_free(n[0]);
}

/* IPv6 and host names, where the machine has them. */
static void test_addresses(void **state)
{
	struct opts o = { .nodes = 2, .secret = &secret };
	struct node *n[2];
	char addr[64];
	int fd;

	(void)state;
	n[0] = node_new(0, 1, &o);
	snprintf(addr, sizeof(addr), "localhost:%d", peer_tcp_port(n[0]->x));
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd >= 0) {
		struct sockaddr_in6 sa = { .sin6_family = AF_INET6,
					   .sin6_addr = IN6ADDR_LOOPBACK_INIT };

		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			o.listen = "[::1]:0";
		close(fd);
	}
	n[1] = node_new(1, 2, &o);
	assert_int_equal(peer_set_addr(n[1]->x, 0, addr), 0);
	if (o.listen)
		snprintf(addr, sizeof(addr), "[::1]:%d",
			 peer_tcp_port(n[1]->x));
	else
		snprintf(addr, sizeof(addr), "127.0.0.1:%d",
			 peer_tcp_port(n[1]->x));
	assert_int_equal(peer_set_addr(n[0]->x, 1, addr), 0);
	assert_int_equal(send_small(n[0], 1, 0, 0), 0);
	assert_int_equal(send_small(n[1], 0, 0, 0), 0);
	assert_true(wait_u64(n[0], &n[0]->stream_got, 1, 10000));
	assert_true(wait_u64(n[1], &n[1]->stream_got, 1, 10000));

	assert_int_equal(peer_set_addr(n[0]->x, 1, "::1:80"), -EINVAL);
	assert_int_equal(peer_set_addr(n[0]->x, 1, "host"), -EINVAL);
	assert_int_equal(peer_set_addr(n[0]->x, 1, "host:99999"), -EINVAL);
	assert_int_equal(peer_set_addr(n[0]->x, 1, ":80"), -EINVAL);
	assert_int_equal(peer_set_addr(n[0]->x, 1, "[::1:80"), -EINVAL);
	node_free(n[1]);
	node_free(n[0]);
}

/* --- refusals ------------------------------------------------------------- */

static void refused(const struct opts *o0, const struct opts *o1)
{
	struct node *n[2];
	int64_t end;
	int k;

	n[0] = node_new(0, 1, o0);
	n[1] = node_new(1, 2, o1);
	connect_all(n, 2);
	for (k = 0; k < 2; k++) {
		struct node *a = n[k], *b = n[1 - k];

		assert_int_equal(send_small(a, b->id, 0, 0), -ENOTCONN);
		assert_true(stats(a, b->id).auth_failed >= 1);
		/* The server side counts it too, on its own thread. */
		end = now_ms() + 10000;
		while (stats(b, a->id).auth_failed < 1 && now_ms() < end)
			sleep_ms(2);
		assert_true(stats(b, a->id).auth_failed >= 1);
		assert_false(stats(a, b->id).up);
	}
	sleep_ms(50);
	for (k = 0; k < 2; k++) {
		assert_int_equal(get_u64(n[k], &n[k]->delivered[1 - k]), 0);
		assert_int_equal(stats(n[k], 1 - k).frames_in, 0);
		assert_int_equal(stats(n[k], 1 - k).connects, 0);
		assert_int_equal(count_ev(n[k], 1 - k, k ? 1 : 2, true), 0);
	}
	node_free(n[1]);
	node_free(n[0]);
}

static void test_wrong_secret(void **state)
{
	struct opts a = { .nodes = 2, .secret = &secret };
	struct opts b = { .nodes = 2, .secret = &other_secret };

	(void)state;
	refused(&a, &b);
}

static void test_wrong_group(void **state)
{
	struct opts a = { .nodes = 2, .secret = &secret };
	struct opts b = { .nodes = 2, .secret = &secret, .group = "other" };

	(void)state;
	refused(&a, &b);
}

/* --- fuzz: a raw client -------------------------------------------------- */

struct fuzz {
	uint64_t rs;
	int port;
	int self;		/* the id the raw client claims */
	int target;		/* the transport's id */
	uint64_t target_inc;
	uint8_t last_auth[GRP_MAC_LEN]; /* from an earlier connection */
	bool have_auth;
	int closed, kept;	/* connections the server closed / kept */
};

static int raw_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return; /* the server may have closed: that is fine */
		p += n;
		len -= (size_t)n;
	}
}

/* Read exactly @len bytes within @ms.  0 or -1. */
static int raw_read(int fd, void *buf, size_t len, int ms)
{
	uint8_t *p = buf;
	int64_t end = now_ms() + ms;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	ssize_t n;

	while (len > 0) {
		int left = (int)(end - now_ms());

		if (left <= 0 || poll(&pf, 1, left) <= 0)
			return -1;
		n = recv(fd, p, len, 0);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Does the server close @fd within @ms (whatever it still sends)? */
static bool raw_closed(int fd, int ms)
{
	int64_t end = now_ms() + ms;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	uint8_t b[512];
	ssize_t n;

	for (;;) {
		int left = (int)(end - now_ms());

		if (left <= 0 || poll(&pf, 1, left) <= 0)
			return false;
		n = recv(fd, b, sizeof(b), 0);
		if (n <= 0)
			return true;
	}
}

static size_t raw_frame(uint8_t *out, uint16_t type, uint16_t flags,
			uint64_t rid, uint64_t seq, const void *meta,
			uint32_t mlen, const void *bulk, uint32_t blen)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.type = type,
		.flags = flags,
		.meta_len = mlen,
		.bulk_len = blen,
		.bulk_crc = blen ? ers_crc32c(0, bulk, blen) : 0,
		.rid = rid,
		.seq = seq,
		.meta_crc = mlen ? ers_crc32c(0, meta, mlen) : 0,
	};

	wire_hdr_encode(&h, out);
	if (mlen)
		memcpy(out + WIRE_HDR_LEN, meta, mlen);
	if (blen)
		memcpy(out + WIRE_HDR_LEN + mlen, bulk, blen);
	return WIRE_HDR_LEN + mlen + blen;
}

/*
 * The handshake as docs/protocol.md defines it, written from the
 * document (not with hs.c): the MAC, and a peer link's HELLO from node
 * @id (incarnation @inc) to node @to.
 */
#define DOC_SERVER "reftfs link server v2"
#define DOC_CLIENT "reftfs link client v2"

static void doc_mac(const char *label, uint32_t cid, uint32_t sid,
		    uint64_t cinc, uint64_t sinc, const uint8_t *cn,
		    const uint8_t *sn, uint8_t *mac)
{
	uint8_t ids[24], link = 1;
	struct grp_part parts[] = {
		{ label, strlen(label) }, { &link, 1 },
		{ GROUP, strlen(GROUP) }, { ids, 24 },
		{ cn, GRP_NONCE_LEN }, { sn, GRP_NONCE_LEN },
	};

	put32(ids, cid);
	put32(ids + 4, sid);
	put64(ids + 8, cinc);
	put64(ids + 16, sinc);
	grp_mac(&secret, parts, 6, mac);
}

static size_t hello(uint8_t *out, uint32_t id, uint32_t to, uint64_t inc,
		    uint8_t *nonce, const char *group)
{
	uint8_t m[64 + 64];
	size_t gl = strlen(group);

	memset(m, 0, 64);
	memcpy(m, "RFTH", 4);
	m[4] = 2;	/* version */
	m[6] = 1;	/* a peer link */
	m[7] = (uint8_t)gl;
	put32(m + 8, id);
	put32(m + 12, to);
	put64(m + 16, inc);
	memcpy(m + 32, nonce, GRP_NONCE_LEN);
	memcpy(m + 64, group, gl);
	return raw_frame(out, PEER_T_HELLO, 0, 0, 1, m, (uint32_t)(64 + gl),
			 NULL, 0);
}

/*
 * HELLO and CHALLENGE; fills the MAC the client must send.  0, or -1 if
 * the server did not answer as it should.
 */
static int raw_hello(struct fuzz *z, int fd, uint8_t *auth_mac)
{
	uint8_t buf[512], cn[GRP_NONCE_LEN], want[GRP_MAC_LEN];
	struct wire_hdr h;
	size_t len;
	uint64_t sinc;

	grp_random(cn, sizeof(cn));
	len = hello(buf, (uint32_t)z->self, (uint32_t)z->target, 99, cn,
		    GROUP);
	raw_send(fd, buf, len);
	if (raw_read(fd, buf, WIRE_HDR_LEN, 5000) < 0 ||
	    wire_hdr_decode(buf, &h) < 0 || h.type != PEER_T_CHALLENGE ||
	    h.seq != 1 || h.meta_len != 80 ||
	    raw_read(fd, buf, 80, 5000) < 0)
		return -1;
	sinc = get64(buf + 8);
	if (memcmp(buf, "RFTH", 4) != 0 || buf[4] != 2 || buf[6] != 1 ||
	    sinc != z->target_inc)
		return -1;
	doc_mac(DOC_SERVER, (uint32_t)z->self, (uint32_t)z->target, 99, sinc,
		cn, buf + 16, want);
	if (memcmp(want, buf + 48, GRP_MAC_LEN) != 0)
		return -1;
	doc_mac(DOC_CLIENT, (uint32_t)z->self, (uint32_t)z->target, 99, sinc,
		cn, buf + 16, auth_mac);
	return 0;
}

static int raw_handshake(struct fuzz *z, int fd)
{
	uint8_t mac[GRP_MAC_LEN], buf[128];
	struct wire_hdr h;
	size_t len;

	if (raw_hello(z, fd, mac) < 0)
		return -1;
	len = raw_frame(buf, PEER_T_AUTH, 0, 0, 2, mac, GRP_MAC_LEN, NULL, 0);
	raw_send(fd, buf, len);
	if (raw_read(fd, buf, WIRE_HDR_LEN, 5000) < 0 ||
	    wire_hdr_decode(buf, &h) < 0 || h.type != PEER_T_WELCOME ||
	    h.seq != 2 || h.meta_len != 0)
		return -1;
	memcpy(z->last_auth, mac, sizeof(mac));
	z->have_auth = true;
	return 0;
}

static void flip(struct fuzz *z, uint8_t *p, size_t len, int bits)
{
	while (bits-- > 0 && len > 0) {
		size_t i = (size_t)(rnd(&z->rs) % (len * 8));

		p[i / 8] ^= (uint8_t)(1u << (i % 8));
	}
}

static void recrc(uint8_t *hdr)
{
	put32(hdr + 44, ers_crc32c(0, hdr, 44));
}

/* Expect the server to close @fd; count what it did. */
static void expect_closed(struct fuzz *z, int fd, int ms)
{
	if (raw_closed(fd, ms))
		z->closed++;
	else
		fail_msg("the server kept a connection it should have closed");
	close(fd);
}

/*
 * An authenticated connection, then frames: good ones, ones with a
 * damaged bulk (delivered with -EBADMSG: the stream is intact), and one
 * fatal mutation that must close the link.
 */
static void fuzz_session(struct fuzz *z, uint8_t *buf, uint8_t *bulk)
{
	uint64_t seq = 3;
	int fd = raw_connect(z->port), i, frames;
	uint8_t meta[256];
	size_t len;
	uint32_t mlen, blen;
	int kind;

	if (raw_handshake(z, fd) < 0)
		fail_msg("a correct handshake was refused");
	frames = (int)(rnd(&z->rs) % 4);
	for (i = 0; i <= frames; i++) {
		mlen = (uint32_t)(rnd(&z->rs) % sizeof(meta));
		blen = (uint32_t)(rnd(&z->rs) % 3 == 0 ? 0 :
				  rnd(&z->rs) % 70000);
		grp_random(meta, mlen);
		grp_random(bulk, blen);
		len = raw_frame(buf, T_FUZZ, 0, rnd(&z->rs), seq, meta, mlen,
				bulk, blen);
		if (i < frames) {
			if (blen && rnd(&z->rs) % 2) /* damaged bulk */
				flip(z, buf + WIRE_HDR_LEN + mlen, blen, 1);
			raw_send(fd, buf, len);
			seq++;
			continue;
		}
		kind = (int)(rnd(&z->rs) % 13);
		switch (kind) {
		case 0: /* a flipped header bit */
			flip(z, buf, WIRE_HDR_LEN, 1 + (int)(rnd(&z->rs) % 3));
			break;
		case 1: /* a flipped meta bit */
			if (!mlen)
				buf[10] = 1; /* reserved: no meta to flip */
			else
				flip(z, buf + WIRE_HDR_LEN, mlen, 1);
			if (!mlen)
				recrc(buf);
			break;
		case 2: /* a gap in the sequence */
			len = raw_frame(buf, T_FUZZ, 0, 1, seq + 1 +
					rnd(&z->rs) % 5, meta, mlen, bulk,
					blen);
			break;
		case 3: /* a replayed sequence number */
			len = raw_frame(buf, T_FUZZ, 0, 1, seq - 1, meta,
					mlen, bulk, blen);
			break;
		case 4: /* oversized meta, with a right header CRC */
			put32(buf + 12, PEER_META_MAX + 1 +
				(uint32_t)(rnd(&z->rs) % 1000000));
			recrc(buf);
			break;
		case 5: /* oversized bulk */
			put32(buf + 16, rnd(&z->rs) % 2 ? UINT32_MAX :
				PEER_BULK_MAX + 1);
			recrc(buf);
			break;
		case 6: /* a handshake frame after the handshake */
			len = raw_frame(buf, (uint16_t)(1 + rnd(&z->rs) % 15),
					0, 0, seq, meta, mlen, NULL, 0);
			break;
		case 7: /* a type nobody registered */
			len = raw_frame(buf, T_UNKNOWN, 0, 2, seq, meta, mlen,
					bulk, blen);
			break;
		case 8: /* a type beyond PEER_T_MAX */
			len = raw_frame(buf,
					256 + (uint16_t)(rnd(&z->rs) % 999),
					0, 2, seq, meta, mlen, NULL, 0);
			break;
		case 9: /* an unknown flag */
			len = raw_frame(buf, T_FUZZ,
					(uint16_t)(4u << rnd(&z->rs) % 14), 2,
					seq, meta, mlen, NULL, 0);
			break;
		case 10: /* an error reply that is not 4 bytes of errno */
			len = raw_frame(buf, T_FUZZ,
					PEER_F_REPLY | PEER_F_ERROR, 0, seq,
					meta, mlen, NULL, 0);
			/* a stale reply is dropped quietly: so end it here */
			raw_send(fd, buf, len);
			shutdown(fd, SHUT_WR);
			expect_closed(z, fd, 5000);
			return;
		case 11: /* truncated, then gone */
			len = (size_t)(rnd(&z->rs) % len);
			raw_send(fd, buf, len);
			shutdown(fd, SHUT_WR);
			expect_closed(z, fd, 5000);
			return;
		default: /* random bytes where a header belongs */
			grp_random(buf, WIRE_HDR_LEN);
			break;
		}
		raw_send(fd, buf, len);
	}
	expect_closed(z, fd, 5000);
}

static void fuzz_one(struct fuzz *z, uint8_t *buf, uint8_t *bulk)
{
	uint8_t cn[GRP_NONCE_LEN], mac[GRP_MAC_LEN];
	int fd, kind = (int)(rnd(&z->rs) % 12);
	size_t len;

	grp_random(cn, sizeof(cn));
	switch (kind) {
	case 0: /* random bytes, then EOF */
		fd = raw_connect(z->port);
		len = 1 + (size_t)(rnd(&z->rs) % 300);
		grp_random(buf, len);
		raw_send(fd, buf, len);
		shutdown(fd, SHUT_WR);
		expect_closed(z, fd, 5000);
		return;
	case 1: /* a HELLO with flipped bits */
		fd = raw_connect(z->port);
		len = hello(buf, (uint32_t)z->self, (uint32_t)z->target, 99, cn,
		    GROUP);
		flip(z, buf, len, 1 + (int)(rnd(&z->rs) % 4));
		raw_send(fd, buf, len);
		shutdown(fd, SHUT_WR);
		expect_closed(z, fd, 5000);
		return;
	case 2: /* a data frame before any handshake */
		fd = raw_connect(z->port);
		len = raw_frame(buf, T_FUZZ, 0, 0, 1, cn, 8, cn, 8);
		raw_send(fd, buf, len);
		expect_closed(z, fd, 5000);
		return;
	case 3: /* HELLO, then data instead of AUTH */
		fd = raw_connect(z->port);
		if (raw_hello(z, fd, mac) < 0)
			fail_msg("HELLO not answered");
		len = raw_frame(buf, T_FUZZ, 0, 0, 2, mac, 32, NULL, 0);
		raw_send(fd, buf, len);
		expect_closed(z, fd, 5000);
		return;
	case 4: /* a wrong MAC */
		fd = raw_connect(z->port);
		if (raw_hello(z, fd, mac) < 0)
			fail_msg("HELLO not answered");
		flip(z, mac, sizeof(mac), 1);
		len = raw_frame(buf, PEER_T_AUTH, 0, 0, 2, mac, 32, NULL, 0);
		raw_send(fd, buf, len);
		expect_closed(z, fd, 5000);
		return;
	case 5: /* a MAC from an earlier connection: no replay */
		if (!z->have_auth)
			return;
		fd = raw_connect(z->port);
		if (raw_hello(z, fd, mac) < 0)
			fail_msg("HELLO not answered");
		len = raw_frame(buf, PEER_T_AUTH, 0, 0, 2, z->last_auth, 32,
				NULL, 0);
		raw_send(fd, buf, len);
		expect_closed(z, fd, 5000);
		return;
	case 6: /* another group, the server's own id, an id out of range,
		 * another server */
		fd = raw_connect(z->port);
		switch (rnd(&z->rs) % 4) {
		case 0:
			len = hello(buf, (uint32_t)z->self,
				    (uint32_t)z->target, 99, cn, "other");
			break;
		case 1:
			len = hello(buf, (uint32_t)z->target,
				    (uint32_t)z->target, 99, cn, GROUP);
			break;
		case 2:
			len = hello(buf, (uint32_t)z->self,
				    (uint32_t)(z->target + 1) % NODES, 99, cn,
				    GROUP);
			break;
		default:
			len = hello(buf, NODES + (uint32_t)(rnd(&z->rs) % 99),
				    (uint32_t)z->target, 99, cn, GROUP);
		}
		raw_send(fd, buf, len);
		expect_closed(z, fd, 5000);
		return;
	case 7: /* a HELLO whose group length lies */
		fd = raw_connect(z->port);
		len = hello(buf, (uint32_t)z->self, (uint32_t)z->target, 99, cn,
		    GROUP);
		buf[WIRE_HDR_LEN + 7] ^= (uint8_t)(1 + rnd(&z->rs) % 200);
		put32(buf + 40, ers_crc32c(0, buf + WIRE_HDR_LEN,
					   len - WIRE_HDR_LEN));
		recrc(buf);
		raw_send(fd, buf, len);
		expect_closed(z, fd, 5000);
		return;
	case 8: /* a HELLO with a huge meta: refused before it is read */
		fd = raw_connect(z->port);
		len = hello(buf, (uint32_t)z->self, (uint32_t)z->target, 99, cn,
		    GROUP);
		put32(buf + 12, 1 + (uint32_t)(rnd(&z->rs) % PEER_META_MAX) +
			(rnd(&z->rs) % 2 ? 0 : 1000));
		recrc(buf);
		raw_send(fd, buf, WIRE_HDR_LEN);
		expect_closed(z, fd, 5000);
		return;
	default:
		fuzz_session(z, buf, bulk);
	}
}

/* Slow senders: bounded by handshake_ms before auth, idle_ms after. */
static void fuzz_slow(struct fuzz *z, uint8_t *buf, uint8_t *bulk, int hs_ms,
		      int idle_ms)
{
	uint8_t cn[GRP_NONCE_LEN];
	int64_t t0;
	size_t len;
	int fd;

	/* Connects, says nothing. */
	t0 = now_ms();
	fd = raw_connect(z->port);
	expect_closed(z, fd, 20 * hs_ms);
	assert_true(now_ms() - t0 >= hs_ms - 20);

	/* Half a HELLO, one byte at a time, then stops. */
	grp_random(cn, sizeof(cn));
	fd = raw_connect(z->port);
	len = hello(buf, (uint32_t)z->self, (uint32_t)z->target, 99, cn,
		    GROUP);
	raw_send(fd, buf, 1);
	raw_send(fd, buf + 1, 1);
	expect_closed(z, fd, 20 * hs_ms);

	/* Authenticated, then half a frame. */
	fd = raw_connect(z->port);
	if (raw_handshake(z, fd) < 0)
		fail_msg("a correct handshake was refused");
	len = raw_frame(buf, T_FUZZ, 0, 0, 3, cn, 32, cn, 32);
	t0 = now_ms();
	raw_send(fd, buf, len / 2);
	expect_closed(z, fd, 20 * idle_ms);
	assert_true(now_ms() - t0 >= idle_ms - 20);

	/* A frame's bulk into the module's buffer, cut off: deliver is
	 * still called, with -ECONNRESET. */
	fd = raw_connect(z->port);
	if (raw_handshake(z, fd) < 0)
		fail_msg("a correct handshake was refused");
	len = raw_frame(buf, T_FUZZ, 0, 2, 3, cn, 32, bulk, 4096);
	raw_send(fd, buf, len - 100);
	expect_closed(z, fd, 20 * idle_ms);

	/* More strangers at once than handshakes are allowed. */
	{
		int fds[24], i;

		for (i = 0; i < 24; i++)
			fds[i] = raw_connect(z->port);
		for (i = 0; i < 24; i++)
			expect_closed(z, fds[i], 20 * hs_ms);
	}
}

/*
 * At most a few connections are in their handshake at once: more are
 * closed at once, while those admitted wait their handshake_ms out.
 */
static void test_handshake_limit(void **state)
{
	struct opts o = { .nodes = 2, .secret = &secret,
			  .handshake_ms = 8000 };
	struct node *n = node_new(0, 1, &o);
	int fds[24], closed[24] = { 0 }, nclosed = 0, i;
	int64_t end = now_ms() + 6000;

	(void)state;
	for (i = 0; i < 24; i++)
		fds[i] = raw_connect(peer_tcp_port(n->x));
	while (nclosed < 16 && now_ms() < end)
		for (i = 0; i < 24; i++)
			if (!closed[i] && raw_closed(fds[i], 1)) {
				closed[i] = 1;
				nclosed++;
			}
	/* 8 admitted (TCP_HS_MAX), whose 8 s are far from over. */
	assert_int_equal(nclosed, 16);
	for (i = 0; i < 24; i++)
		if (!closed[i])
			assert_false(raw_closed(fds[i], 1));
	for (i = 0; i < 24; i++)
		close(fds[i]);
	assert_true(stats(n, 0).auth_failed >= 16);
	node_free(n);
}

/* --- a fake server: the client side checks the server -------------------- */

enum fake_mode {
	FAKE_BAD_MAC,	/* a CHALLENGE with a MAC made without the secret */
	FAKE_WRONG_ID,	/* a right MAC, but for another node's id */
	FAKE_REFLECT,	/* the MAC under the client's label */
	FAKE_OK_STALL,	/* right, then stops reading mid-frame */
	FAKE_MODES,
};

struct fake {
	int lfd;
	/* results, per mode: read by the test after the join */
	ssize_t after[FAKE_MODES];	/* bytes the client sent after the
					 * CHALLENGE (before it closed) */
	bool auth_ok;			/* AUTH's MAC as documented */
	uint64_t first_seq;
	uint16_t first_type;
	ssize_t drained;
	int stall_ms;
};

/* Read until EOF or @ms; the byte count. */
static ssize_t drain(int fd, int ms)
{
	static uint8_t b[1 << 16];
	int64_t end = now_ms() + ms;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	ssize_t total = 0, n;

	for (;;) {
		int left = (int)(end - now_ms());

		if (left <= 0 || poll(&pf, 1, left) <= 0)
			return -1;
		n = recv(fd, b, sizeof(b), 0);
		if (n <= 0)
			return total;
		total += n;
	}
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	uint8_t buf[512], cn[GRP_NONCE_LEN], sn[GRP_NONCE_LEN], m[80];
	uint8_t mac[GRP_MAC_LEN];
	struct wire_hdr h;
	int mode, fd;
	size_t len;

	for (mode = 0; mode < FAKE_MODES; mode++) {
		f->after[mode] = -2;
		fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		if (raw_read(fd, buf, WIRE_HDR_LEN, 5000) < 0 ||
		    wire_hdr_decode(buf, &h) < 0 || h.type != PEER_T_HELLO ||
		    h.meta_len > 200 ||
		    raw_read(fd, buf, h.meta_len, 5000) < 0) {
			close(fd);
			continue;
		}
		memcpy(cn, buf + 32, GRP_NONCE_LEN);
		grp_random(sn, sizeof(sn));
		memset(m, 0, 16);
		memcpy(m, "RFTH", 4);
		m[4] = 2;
		m[6] = 1;
		put64(m + 8, 77);
		memcpy(m + 16, sn, GRP_NONCE_LEN);
		if (mode == FAKE_BAD_MAC)
			grp_random(m + 48, GRP_MAC_LEN);
		else
			doc_mac(mode == FAKE_REFLECT ? DOC_CLIENT : DOC_SERVER,
				get32(buf + 8), mode == FAKE_WRONG_ID ? 2 : 1,
				get64(buf + 16), 77, cn, sn, m + 48);
		len = raw_frame(buf, PEER_T_CHALLENGE, 0, 0, 1, m, 80, NULL,
				0);
		raw_send(fd, buf, len);
		if (mode != FAKE_OK_STALL) {
			f->after[mode] = drain(fd, 10000);
			close(fd);
			continue;
		}
		if (raw_read(fd, buf, WIRE_HDR_LEN + GRP_MAC_LEN, 5000) < 0) {
			close(fd);
			continue;
		}
		doc_mac(DOC_CLIENT, 0, 1, 5, 77, cn, sn, mac);
		f->auth_ok = wire_hdr_decode(buf, &h) == 0 &&
			     h.type == PEER_T_AUTH && h.seq == 2 &&
			     memcmp(buf + WIRE_HDR_LEN, mac, GRP_MAC_LEN) == 0;
		len = raw_frame(buf, PEER_T_WELCOME, 0, 0, 2, NULL, 0, NULL, 0);
		raw_send(fd, buf, len);
		/* The first frame (small), then a stall amid the next. */
		if (raw_read(fd, buf, WIRE_HDR_LEN, 5000) == 0 &&
		    wire_hdr_decode(buf, &h) == 0) {
			f->first_seq = h.seq;
			f->first_type = h.type;
			raw_read(fd, buf, h.meta_len, 5000);
		}
		sleep_ms(f->stall_ms);
		f->drained = drain(fd, 10000);
		close(fd);
	}
	return NULL;
}

static void test_fake_server(void **state)
{
	struct opts o = { .nodes = NODES, .secret = &secret };
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct fake f = { .stall_ms = 1500 };
	struct node *n;
	struct peer_frame big = { .type = T_STREAM };
	uint32_t big_len = 48u << 20;
	uint8_t *bulk;
	char addr[64];
	pthread_t th;
	int mode;

	(void)state;
	f.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f.lfd >= 0);
	assert_int_equal(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f.lfd, 8), 0);
	assert_int_equal(getsockname(f.lfd, (struct sockaddr *)&sa, &sl), 0);
	n = node_new(0, 5, &o);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
	assert_int_equal(peer_set_addr(n->x, 1, addr), 0);
	assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);

	/* The client refuses a server that cannot prove the secret, that
	 * is another node, or that reflects the client's own role. */
	for (mode = 0; mode < FAKE_OK_STALL; mode++) {
		assert_int_equal(send_small(n, 1, 0, 0), -ENOTCONN);
		assert_int_equal(stats(n, 1).auth_failed, (uint64_t)mode + 1);
	}
	/* A right one: AUTH as documented, data from seq 3, link up. */
	assert_int_equal(send_small(n, 1, 0, 0), 0);
	assert_true(wait_ev(n, 1, 77, true, 1));
	/* It stops reading: a send that times out mid-frame closes the
	 * link, since the stream is no longer framed. */
	bulk = calloc(1, big_len);
	assert_non_null(bulk);
	big.bulk = bulk;
	big.bulk_len = big_len;
	big.bulk_crc = ers_crc32c(0, bulk, big_len);
	assert_int_equal(peer_send(n->x, 1, &big, 300), -ETIMEDOUT);
	assert_true(wait_ev(n, 1, 77, false, 1));
	pthread_join(th, NULL);
	for (mode = 0; mode < FAKE_OK_STALL; mode++)
		assert_int_equal(f.after[mode], 0); /* no AUTH sent */
	assert_true(f.auth_ok);
	assert_int_equal(f.first_seq, 3);
	assert_int_equal(f.first_type, T_STREAM);
	assert_true(f.drained >= 0); /* EOF came */
	assert_true(f.drained < (ssize_t)big_len);
	close(f.lfd);
	node_free(n);
	free(bulk);
}

static void test_fuzz(void **state)
{
	struct opts o = { .nodes = NODES, .secret = &secret,
			  .handshake_ms = 150, .idle_ms = 150 };
	struct opts ok = { .nodes = NODES, .secret = &secret };
	struct node *t, *p;
	struct fuzz z = { .self = 2, .target = 0, .target_inc = 500 };
	uint8_t *buf = malloc(1u << 20), *bulk = malloc(1u << 20);
	const char *env = getenv("PEER_FUZZ_SEED");
	const char *iters_env = getenv("PEER_FUZZ_ITERS");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 20240611;
	int iters = iters_env ? atoi(iters_env) : 1500, i;
	struct peer_stats st, self;
	struct node *np[2];
	int64_t t0 = now_ms();

	(void)state;
	printf("fuzz: PEER_FUZZ_SEED=%llu PEER_FUZZ_ITERS=%d\n",
	       (unsigned long long)seed, iters);
	fflush(stdout);
	z.rs = seed;
	t = node_new(0, 500, &o);
	p = node_new(1, 501, &ok);
	np[0] = t;
	np[1] = p;
	connect_all(np, 2);
	z.port = peer_tcp_port(t->x);

	for (i = 0; i < iters; i++)
		fuzz_one(&z, buf, bulk);
	fuzz_slow(&z, buf, bulk, o.handshake_ms, o.idle_ms);
	printf("fuzz: %d connections closed by the server in %lld ms\n",
	       z.closed, (long long)(now_ms() - t0));

	st = stats(t, 2);
	self = stats(t, 0);
	printf("fuzz: node 2: bad_frames %llu crc_errors %llu auth_failed "
	       "%llu unknown_type %llu frames_in %llu; unattributed: "
	       "bad_frames %llu auth_failed %llu\n",
	       (unsigned long long)st.bad_frames,
	       (unsigned long long)st.crc_errors,
	       (unsigned long long)st.auth_failed,
	       (unsigned long long)st.unknown_type,
	       (unsigned long long)st.frames_in,
	       (unsigned long long)self.bad_frames,
	       (unsigned long long)self.auth_failed);
	assert_true(st.bad_frames > 0);
	assert_true(st.crc_errors > 0);
	assert_true(st.auth_failed > 0);
	assert_true(st.unknown_type > 0);
	assert_true(self.bad_frames > 0);
	assert_true(self.auth_failed > 0);
	assert_true(get_u64(t, &t->fuzz_got) > 0);
	assert_true(get_u64(t, &t->fuzz_badcrc) > 0);
	assert_true(get_u64(t, &t->fuzz_reset) > 0);
	assert_int_equal(get_u64(t, &t->outstanding), 0);
	/* The correct peer never saw a thing go wrong. */
	st = stats(t, 1);
	assert_int_equal(st.bad_frames + st.crc_errors + st.auth_failed, 0);

	/* And the transport still serves it, both ways. */
	for (i = 0; i < 50; i++) {
		assert_int_equal(send_small(p, 0, (uint64_t)i, 0), 0);
		assert_int_equal(send_small(t, 1, (uint64_t)i, 0), 0);
	}
	assert_true(wait_u64(t, &t->stream_got, 50, 10000));
	assert_true(wait_u64(p, &p->stream_got, 50, 10000));
	{
		uint8_t m[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, rm[8];
		struct peer_frame req = { .type = T_ECHO, .meta = m,
					  .meta_len = 8 };
		struct peer_reply rep = { .meta = rm, .meta_cap = 8 };

		assert_int_equal(peer_call(p->x, 0, &req, &rep, 10000), 0);
		assert_memory_equal(rm, m, 8);
		assert_int_equal(peer_call(t->x, 1, &req, &rep, 10000), 0);
	}
	assert_int_equal(get_u64(t, &t->errors), 0);
	assert_int_equal(get_u64(p, &p->errors), 0);
	node_free(p);
	node_free(t);
	free(buf);
	free(bulk);
}

/* Open descriptors: every test must give back every socket it made. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static int fds_before;

static int fd_setup(void **state)
{
	(void)state;
	fds_before = count_fds();
	return 0;
}

static int fd_teardown(void **state)
{
	int now = count_fds();

	(void)state;
	if (now != fds_before) {
		fprintf(stderr, "%d descriptors before the test, %d after\n",
			fds_before, now);
		return -1;
	}
	return 0;
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, fd_setup, fd_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST(test_secret_file),
		TEST(test_streams),
		TEST(test_calls),
		TEST(test_call_reset),
		TEST(test_reconnect),
		TEST(test_addresses),
		TEST(test_wrong_secret),
		TEST(test_wrong_group),
		TEST(test_handshake_limit),
		TEST(test_fake_server),
		TEST(test_fuzz),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
