/*
 * test_parity.c - erasure-coded protection (engine/parity.c) across N
 * in-process nodes over the fake transport, checked against a model.
 *
 * Each node is what a daemon has for it: an engine (eng_new: its arena,
 * never started), a fake transport endpoint, a real membership (memb over
 * that endpoint, short heartbeats) and a parity instance for the scheme;
 * a small shim does what protect.c does with the PAR_T_* frames: FOLD and
 * UNFOLD straight to parity_rx_dest/parity_rx_fold on the receive thread,
 * DONE and GET computed there and answered from an answerer thread.
 *
 * For xor on 3 and 4 nodes, rs:2+2 on 4, rs:4+2 on 6 and rs:2+1 on 4 (a
 * group larger than k + m), with one seed:
 *  - every node owns files of random sizes (0, under a chunk, whole
 *    chunks, several and a tail) whose pieces take chunk numbers per owner
 *    and checkpoint in log order (file.c, take_chunks), with holes, short
 *    pieces (zeros past fill, garbage in the arena) and trailing holes;
 *  - the owners fold them (parity_send, then parity_ask) in a random
 *    order, concurrently, some twice; every DONE must then say 0;
 *  - every holder's rows (PAR_T_GET, a third over the transport, the
 *    rest from parity_rx_get straight) must be the rows ers_encode gives
 *    from the model's members, with the model's member table; stripes
 *    without members have no row; the rows counted and the free chunks
 *    match (no chunk leaked); parity_scrub finds every row good;
 *  - malformed FOLDs (wrong slot for the sender, wrong scheme, bulk CRC
 *    unlike the meta's, wrong length, reserved bits, slot out of range,
 *    oversized, a node holding no row, a bulk that failed its CRC or a
 *    link that died under it) fold nothing, and a well-formed one there
 *    does; a holder out of memory refuses a fold and DONE says so;
 *  - nodes are lost (their endpoint, membership, parity and arena gone):
 *    every piece they owned is rebuilt (parity_rebuild_piece) on the
 *    survivors, three at a time, a stripe's pieces on one node (its
 *    readers meet), right at once (the view still says UP) and, for one
 *    loss set, once the view says DEAD; the outcome must be exactly what the
 *    model says is decodable (every m-loss set: all of it), never wrong
 *    bytes; m + 1 losses fail where the stripe has too many unknowns;
 *    the lost nodes are then replaced (empty) and the owners fold into
 *    them again; an owner's pieces are also read while a holder lost
 *    with it is back, empty, folded into again by the live owners only
 *    (its rows lack them and must be passed over);
 *  - files are unlinked (unfolded), rows without members go back to the
 *    store;
 *  - with drops and delays on the fake net, rewrites fold and unlinks
 *    unfold after retrying as protect.c does, and the rows still match;
 *  - a node lost while some of its files were unlinked: after its
 *    replacement, the holders take those members (orphans) out
 *    themselves (parity_drop_orphans), and only those;
 *  - a corrupt row makes a rebuild fail its CRC (-EIO, counted), never
 *    give wrong bytes, and scrub finds it.
 *
 * PARITY_SEED=n replays a run (the schedule; thread timing still varies);
 * PARITY_TEST=glob runs only the schemes named (test_rs_4_2, test_xor_*);
 * PARITY_VERBOSE=1 says when each phase began and how each rebuild went.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_i.h"
#include "erasure.h"
#include "group_test.h"
#include "gns_i.h"
#include "watchdog.h"

#define MAXN 8
#define MAXF 128		/* file versions in one world */
#define MAXP 6			/* pieces of one file */
#define CLEN RFT_CHUNK_MIN	/* the smallest chunk: 1 MiB */
#define ARENA (64ull * CLEN)
#define NCKPT 2
/* Membership, as test_memb: slack enough for a loaded machine. */
#define HB_MS 25
#define SUSPECT_MS 150
#define DEAD_MS 400
#define WAIT_MS 10000
#define CALL_MS 5000
#define FOLD_META 56
/*
 * Under TSan every byte copied costs shadow memory faults: fewer sets of
 * nodes lost there (each rebuilds and folds again megabytes).
 */
#if defined(__SANITIZE_THREAD__)
#define LOSS_SETS 2
#else
#define LOSS_SETS 3
#endif
#define TRIES 200		/* ask/send rounds for one file at one holder,
				   with faults; without, one must do */

static const uint64_t ckpt_ino[NCKPT] = { 1, 17 };
static uint64_t base_seed;

/* --- small things --------------------------------------------------------- */

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

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* --- the world ------------------------------------------------------------ */

enum piece_kind { PK_DATA, PK_SHORT, PK_HOLE };

/* One sealed version of a file, owned by one node. */
struct pfile {
	int owner;
	uint64_t ino, gseal, ckpt, base, size, seed;
	uint32_t npieces, nslots;
	uint8_t pk[MAXP];
	uint32_t fill[MAXP];
	uint32_t crc[MAXP];	/* CRC32C of the piece as the file shows it */
	struct slot slots[MAXP]; /* in the owner's arena while present */
	uint64_t holders;	/* parity_holders_of */
	bool exists;		/* the file's current version: its bytes are
				   (or, after a replacement, come back) in
				   the owner's arena */
	bool present;		/* its chunks are in the owner's arena */
	bool folded;		/* the model: in its stripes' rows */
	bool stale;		/* unlinked while its owner was lost: its
				   bytes are gone, its members orphans */
};

struct ans {
	struct ans *next;
	int node;
	struct peer_frame req;	/* meta unused */
	int rc;
	uint8_t *meta, *bulk;
	uint32_t meta_len, bulk_len;
};

struct world;

struct pnode {
	struct world *w;
	int id;
	bool live;
	uint64_t inc;
	struct eng *e;
	struct peer_xport *x;
	struct memb *m;
	struct parity *par;

	pthread_mutex_t lock;	/* the answer queue */
	pthread_cond_t cv;
	struct ans *head, *tail;
	bool stop;
	pthread_t answerer;
	_Atomic uint64_t rx_refused;	/* frames the shim said -EPROTO to */
};

struct world {
	const char *name;
	int n;
	struct ers_scheme s;	/* as parsed: parity_new fits it */
	struct ers_layout l;
	struct ers_codec *c;
	uint32_t code;
	int k, m;
	uint64_t rng;
	struct peer_fakenet *net;
	uint64_t next_inc;
	char addr[MAXN][32];
	const char *addrs[MAXN];
	struct pnode node[MAXN];
	struct pfile f[MAXF];
	int nf;
	uint64_t next_gseal, next_ino;
	uint64_t next_chunk[NCKPT][MAXN];
	bool lost[MAXN];	/* model_get refuses these nodes */
	_Atomic uint64_t gets, gets_refused;
	_Atomic bool failing;	/* a runner failed: the others stop */
	uint64_t t0;		/* ms, at its start */
	const char *phase;
	/* scratch for the main thread */
	uint8_t *data[ERS_MAX_K], *par[ERS_MAX_M], *row, *buf, *want;
	uint32_t row_len;	/* the bytes of row the last GET gave */
	/* counts for the report */
	unsigned rebuilt, refused_ok, rows_checked, malformed;
};

static uint64_t rnd(struct world *w, uint64_t n)
{
	return n ? splitmix(&w->rng) % n : 0;
}

static int ckpt_index(uint64_t ckpt)
{
	for (int c = 0; c < NCKPT; c++)
		if (ckpt_ino[c] == ckpt)
			return c;
	return -1;
}

static uint32_t piece_len(const struct pfile *f, uint32_t i)
{
	uint64_t start = (uint64_t)i * CLEN;

	if (start >= f->size)
		return 0;
	return f->size - start < CLEN ? (uint32_t)(f->size - start) : CLEN;
}

/* The bytes of the arena chunk of piece @i (all of it): a stream of its own. */
static void chunk_bytes(const struct pfile *f, uint32_t i, uint8_t *p,
			uint32_t len)
{
	uint64_t s = f->seed * 0x100000001b3ull + i;

	for (uint32_t o = 0; o < len; o += 8) {
		uint64_t v = splitmix(&s);

		memcpy(p + o, &v, len - o < 8 ? len - o : 8);
	}
}

/* Piece @i as the file shows it, zero-padded to a chunk, into @p. */
static void piece_bytes(const struct pfile *f, uint32_t i, uint8_t *p)
{
	memset(p, 0, CLEN);
	if (i < f->nslots && f->pk[i] != PK_HOLE)
		chunk_bytes(f, i, p, f->fill[i]);
}

static bool piece_hole(const struct pfile *f, uint32_t i)
{
	return i >= f->nslots || f->pk[i] == PK_HOLE;
}

/* --- the shim: what protect.c does with PAR_T_* --------------------------- */

static void *shim_bulk_dest(void *ctx, int node, const struct peer_frame *f,
			    void **cookie)
{
	struct pnode *nd = ctx;

	if (f->type == PAR_T_FOLD || f->type == PAR_T_UNFOLD)
		return parity_rx_dest(nd->par, node, f, cookie);
	return NULL;
}

static void queue_answer(struct pnode *nd, int node,
			 const struct peer_frame *f, struct ans *a)
{
	a->node = node;
	a->req = *f;
	a->req.meta = NULL;
	a->req.meta_len = 0;
	a->req.bulk = NULL;
	a->req.bulk_len = 0;
	pthread_mutex_lock(&nd->lock);
	if (nd->tail)
		nd->tail->next = a;
	else
		nd->head = a;
	nd->tail = a;
	pthread_cond_broadcast(&nd->cv);
	pthread_mutex_unlock(&nd->lock);
}

static int shim_deliver(void *ctx, int node, const struct peer_frame *f,
			void *cookie, int bulk_rc)
{
	struct pnode *nd = ctx;
	struct ans *a;
	int rc;

	if (f->flags & PEER_F_REPLY)
		return -EPROTO;
	switch (f->type) {
	case PAR_T_FOLD:
	case PAR_T_UNFOLD:
		rc = parity_rx_fold(nd->par, node, f, cookie, bulk_rc);
		if (rc < 0)
			atomic_fetch_add(&nd->rx_refused, 1);
		return rc;
	case PAR_T_DONE:
	case PAR_T_GET:
		a = calloc(1, sizeof(*a));
		if (!a)
			return 0; /* the asker times out */
		a->rc = f->type == PAR_T_DONE
				? parity_rx_done(nd->par, node, f, &a->meta,
						 &a->meta_len)
				: parity_rx_get(nd->par, node, f, &a->meta,
						&a->meta_len, &a->bulk,
						&a->bulk_len);
		queue_answer(nd, node, f, a);
		return 0;
	default:
		atomic_fetch_add(&nd->rx_refused, 1);
		return -EPROTO;
	}
}

static void *answerer_main(void *arg)
{
	struct pnode *nd = arg;

	pthread_mutex_lock(&nd->lock);
	for (;;) {
		struct ans *a = nd->head;

		if (!a) {
			if (nd->stop)
				break;
			pthread_cond_wait(&nd->cv, &nd->lock);
			continue;
		}
		nd->head = a->next;
		if (!nd->head)
			nd->tail = NULL;
		pthread_mutex_unlock(&nd->lock);
		if (a->rc < 0) {
			peer_reply_err(nd->x, a->node, &a->req, a->rc, CALL_MS);
		} else {
			struct peer_frame rep = { .meta = a->meta,
						  .meta_len = a->meta_len,
						  .bulk = a->bulk,
						  .bulk_len = a->bulk_len };

			if (a->bulk_len)
				rep.bulk_crc = ers_crc32c(0, a->bulk,
							  a->bulk_len);
			peer_reply(nd->x, a->node, &a->req, &rep, CALL_MS);
		}
		free(a->meta);
		free(a->bulk);
		free(a);
		pthread_mutex_lock(&nd->lock);
	}
	pthread_mutex_unlock(&nd->lock);
	return NULL;
}

/* --- nodes ---------------------------------------------------------------- */

static int data_chunks(struct world *w, int node)
{
	int n = 0;

	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (f->owner != node || !f->present)
			continue;
		for (uint32_t i = 0; i < f->nslots; i++)
			n += slot_in_ram(&f->slots[i]);
	}
	return n;
}

/* Put @f's pieces into its owner's arena. */
static void pf_load(struct world *w, struct pfile *f)
{
	struct store *st = &w->node[f->owner].e->store;

	for (uint32_t i = 0; i < f->nslots; i++) {
		struct slot *s = &f->slots[i];
		uint32_t len = piece_len(f, i);

		if (f->pk[i] == PK_HOLE) {
			*s = SLOT_HOLE_INIT;
			continue;
		}
		assert_int_equal(store_alloc(st, 0, &s->chunk), 0);
		/* The whole chunk: past fill it holds what the file does
		   not show (zeros are sent, not these). */
		chunk_bytes(f, i, store_ptr(st, s->chunk), CLEN);
		s->fill = f->fill[i];
		s->crc = f->crc[i];
		s->crc_len = len;
		s->where = PIECE_RAM;
		s->flags = 0;
	}
	f->present = true;
}

static void pf_unload(struct world *w, struct pfile *f)
{
	if (f->present && w->node[f->owner].live)
		for (uint32_t i = 0; i < f->nslots; i++)
			if (slot_in_ram(&f->slots[i]))
				store_put(&w->node[f->owner].e->store,
					  f->slots[i].chunk);
	f->present = false;
}

static void node_start(struct world *w, int i)
{
	struct pnode *nd = &w->node[i];
	struct eng_config cfg;
	struct memb_opts o = {
		.self = i,
		.nodes = w->n,
		.addrs = w->addrs,
		.heartbeat_ms = HB_MS,
		.suspect_ms = SUSPECT_MS,
		.dead_ms = DEAD_MS,
	};
	struct peer_rx rx = { .ctx = nd, .bulk_dest = shim_bulk_dest,
			      .deliver = shim_deliver };

	memset(nd, 0, sizeof(*nd));
	nd->w = w;
	nd->id = i;
	nd->inc = o.incarnation = w->next_inc++;
	pthread_mutex_init(&nd->lock, NULL);
	pthread_cond_init(&nd->cv, NULL);
	eng_config_defaults(&cfg);
	cfg.mountpoint = "/nonexistent";
	cfg.mem_bytes = ARENA;
	cfg.chunk_size = CLEN;
	cfg.prefault = ENG_PREFAULT_NONE;
	cfg.node = i;
	assert_int_equal(eng_new(&cfg, &nd->e), 0);
	assert_int_equal(nd->e->store.chunk_size, CLEN);
	assert_int_equal(peer_fake_new(w->net, i, nd->inc, &nd->x), 0);
	assert_int_equal(memb_new(&o, nd->x, &nd->m), 0);
	assert_int_equal(peer_register(nd->x, PEER_T_DATA_FIRST,
				       PEER_T_DATA_LAST, &rx), 0);
	assert_int_equal(parity_new(nd->e, nd->x, nd->m, i, w->n, &w->s,
				    ERS_BACKEND_ISAL, &nd->par), 0);
	assert_int_equal(parity_seal_code(nd->par), w->code);
	assert_int_equal(pthread_create(&nd->answerer, NULL, answerer_main,
					nd), 0);
	assert_int_equal(peer_start(nd->x), 0);
	assert_int_equal(memb_start(nd->m), 0);
	nd->live = true;
}

/* The daemon of node @i is gone, with its memory. */
static void node_kill(struct world *w, int i)
{
	struct pnode *nd = &w->node[i];

	if (!nd->live)
		return;
	/* Nothing of ours sends on the endpoint once it stops. */
	memb_stop(nd->m);
	pthread_mutex_lock(&nd->lock);
	nd->stop = true;
	pthread_cond_broadcast(&nd->cv);
	pthread_mutex_unlock(&nd->lock);
	pthread_join(nd->answerer, NULL);
	peer_stop(nd->x);	/* no receive thread runs any more */
	while (nd->head) {
		struct ans *a = nd->head;

		nd->head = a->next;
		free(a->meta);
		free(a->bulk);
		free(a);
	}
	peer_free(nd->x);
	memb_free(nd->m);
	parity_free(nd->par);
	for (int j = 0; j < w->nf; j++)
		if (w->f[j].owner == i)
			w->f[j].present = false; /* its arena goes */
	eng_free(nd->e);
	pthread_cond_destroy(&nd->cv);
	pthread_mutex_destroy(&nd->lock);
	nd->live = false;
}

static bool sees_up(struct world *w, int a, int b)
{
	struct memb_view v;

	memb_get_view(w->node[a].m, &v);
	return v.node[b].state == MEMB_UP &&
	       v.node[b].incarnation == w->node[b].inc;
}

static bool all_up(struct world *w)
{
	for (int a = 0; a < w->n; a++)
		for (int b = 0; b < w->n; b++)
			if (a != b && w->node[a].live && w->node[b].live &&
			    !sees_up(w, a, b))
				return false;
	return true;
}

static bool sees_dead(struct world *w, int a, const bool *lost)
{
	struct memb_view v;

	memb_get_view(w->node[a].m, &v);
	for (int b = 0; b < w->n; b++)
		if (lost[b] && v.node[b].state != MEMB_DEAD)
			return false;
	return true;
}

static void world_report(void *arg)
{
	struct world *w = arg;

	fprintf(stderr, "test_parity: %s, seed %" PRIu64 ", in phase: %s\n",
		w->name, base_seed, w->phase ? w->phase : "?");
}

static struct world *world_new(const char *name, const char *scheme, int n,
			       uint64_t seed)
{
	struct world *w = calloc(1, sizeof(*w));
	struct ers_scheme fit;

	assert_non_null(w);
	w->name = name;
	w->n = n;
	w->rng = seed;
	w->t0 = now_ms();
	w->next_inc = 0x1000;
	w->next_gseal = 100;
	w->next_ino = 2;
	assert_int_equal(ers_scheme_parse(scheme, &w->s), 0);
	fit = w->s;
	assert_int_equal(ers_scheme_fit(&fit, n), 0);
	assert_int_equal(ers_layout_init(&w->l, &fit, n), 0);
	assert_int_equal(ers_codec_new(&fit, NULL, &w->c), 0);
	w->code = stripe_code(&fit, n);
	w->k = fit.k;
	w->m = fit.m;
	for (int i = 0; i < ERS_MAX_K; i++)
		w->data[i] = i < w->k ? malloc(CLEN) : NULL;
	for (int i = 0; i < w->m; i++)
		assert_non_null(w->par[i] = malloc(CLEN));
	w->row = malloc(CLEN);
	w->buf = malloc(CLEN);
	w->want = malloc(CLEN);
	assert_non_null(w->row);
	assert_non_null(w->buf);
	assert_non_null(w->want);
	w->net = peer_fakenet_new(n, seed);
	assert_non_null(w->net);
	peer_fakenet_delay(w->net, 0, 2);
	for (int i = 0; i < n; i++) {
		snprintf(w->addr[i], sizeof(w->addr[i]), "127.0.0.1:%d",
			 7070 + i);
		w->addrs[i] = w->addr[i];
	}
	w->phase = "start";
	for (int i = 0; i < n; i++)
		node_start(w, i);
	assert_true(WAIT_FOR(all_up(w), WAIT_MS));
	return w;
}

static void world_free(struct world *w)
{
	for (int i = 0; i < w->n; i++)
		if (w->node[i].live)
			memb_stop(w->node[i].m);
	for (int j = 0; j < w->nf; j++)
		pf_unload(w, &w->f[j]);
	for (int i = 0; i < w->n; i++)
		node_kill(w, i);
	peer_fakenet_free(w->net);
	ers_codec_free(w->c);
	for (int i = 0; i < ERS_MAX_K; i++)
		free(w->data[i]);
	for (int i = 0; i < w->m; i++)
		free(w->par[i]);
	free(w->row);
	free(w->buf);
	free(w->want);
	free(w);
}

/* --- files and seals ------------------------------------------------------ */

/* A new version of a file of node @owner (@ino 0: a new file): not sealed. */
static struct pfile *pf_new(struct world *w, int owner, uint64_t ino,
			      int shape)
{
	struct pfile *f;

	assert_true(w->nf < MAXF);
	f = &w->f[w->nf++];
	memset(f, 0, sizeof(*f));
	f->owner = owner;
	f->ino = ino ? ino : w->next_ino++;
	f->seed = splitmix(&w->rng);
	f->ckpt = ckpt_ino[rnd(w, NCKPT)];
	switch (shape) {
	case 0:
		f->size = 0;
		break;
	case 1:
		f->size = 1 + rnd(w, CLEN - 1);
		break;
	case 2:
		f->size = CLEN;
		break;
	case 3:
		f->size = (2 + rnd(w, 3)) * (uint64_t)CLEN;
		break;
	default:
		f->size = (1 + rnd(w, MAXP - 1)) * (uint64_t)CLEN + 1 +
			  rnd(w, CLEN - 1);
		break;
	}
	f->npieces = (uint32_t)((f->size + CLEN - 1) / CLEN);
	assert_true(f->npieces <= MAXP);
	f->nslots = f->npieces;
	for (uint32_t i = 0; i < f->npieces; i++) {
		uint32_t len = piece_len(f, i), r = (uint32_t)rnd(w, 10);

		f->pk[i] = r == 0 ? PK_HOLE : r <= 2 && len > 1 ? PK_SHORT
								 : PK_DATA;
		f->fill[i] = f->pk[i] == PK_HOLE    ? 0
			     : f->pk[i] == PK_SHORT ? (uint32_t)rnd(w, len)
						    : len;
	}
	/* A hole at the end may be no slot at all (nslots < pieces). */
	if (f->npieces && f->pk[f->npieces - 1] == PK_HOLE && rnd(w, 2))
		f->nslots = f->npieces - 1;
	for (uint32_t i = 0; i < f->npieces; i++) {
		piece_bytes(f, i, w->want);
		f->crc[i] = ers_crc32c(0, w->want, piece_len(f, i));
	}
	f->exists = true;
	pf_load(w, f);
	return f;
}

/* Its SEAL applied: the next chunk numbers of its owner (take_chunks). */
static void pf_seal(struct world *w, struct pfile *f)
{
	int c = ckpt_index(f->ckpt);

	f->gseal = w->next_gseal++;
	f->base = w->next_chunk[c][f->owner];
	w->next_chunk[c][f->owner] += f->npieces;
	f->holders = parity_holders_of(w->node[f->owner].par, f->owner,
				       f->base, f->npieces);
}

/* Seal @n files of @list in a random (log) order. */
static void seal_all(struct world *w, struct pfile **list, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)rnd(w, (uint64_t)i + 1);
		struct pfile *t = list[i];

		list[i] = list[j];
		list[j] = t;
	}
	for (int i = 0; i < n; i++)
		pf_seal(w, list[i]);
}

static struct par_seal seal_of(const struct pfile *f)
{
	return (struct par_seal){ f->ino, f->gseal, f->ckpt, f->base,
				  f->npieces };
}

static struct file_snap snap_of(const struct pfile *f)
{
	return (struct file_snap){ .version = 2, .meta_version = 1,
				   .size = f->size, .sealed = true,
				   .nslots = f->nslots,
				   .slots = (struct slot *)f->slots };
}

/* --- folding, as protect.c's fold_at -------------------------------------- */

/*
 * Fold (or take out) @f at holder @h: ask, send on -EAGAIN, ask again,
 * until 0, at most @tries times.  Returns the rounds it took beyond the
 * first, or -errno.
 */
static int fold_at(struct world *w, struct pfile *f, int h, bool unfold,
		   uint8_t *bounce, int tries)
{
	struct pnode *o = &w->node[f->owner];
	struct par_seal ps = seal_of(f);
	struct file_snap fs = snap_of(f);
	uint64_t pieces = 0, bytes = 0;
	int rc = 0;

	for (int t = 0; t < tries && !atomic_load(&w->failing); t++) {
		rc = parity_ask(o->par, h, &ps, unfold, NULL);
		if (rc == -EAGAIN) {
			rc = parity_send(o->par, h, &ps, &fs, unfold, NULL,
					 bounce, NULL, NULL, &pieces, &bytes);
			if (rc == 0)
				rc = parity_ask(o->par, h, &ps, unfold, NULL);
		}
		if (rc == 0)
			return t;
		sleep_ms(1 + t % 4);
	}
	return rc ? rc : -ECANCELED;
}

enum job_kind {
	J_FOLD,			/* fold_at: ask, send, ask */
	J_SEND,			/* parity_send alone */
	J_ASK,			/* parity_ask alone: must say 0 */
};

struct job {
	struct pfile *f;
	int h;
	bool unfold;
	enum job_kind kind;
};

struct runner {
	struct world *w;
	int node;
	struct job *jobs;
	int njobs;
	pthread_t thread;
	bool faults;		/* retry (drops): else one round must do */
	int errors;
	int rounds;		/* resends beyond the first round */
	char msg[256];
};

static void *runner_main(void *arg)
{
	struct runner *r = arg;
	struct world *w = r->w;
	uint8_t *bounce = malloc(CLEN);

	for (int j = 0; bounce && j < r->njobs && !atomic_load(&w->failing);
	     j++) {
		struct job *jb = &r->jobs[j];
		int rc;

		if (jb->kind == J_ASK) {
			struct par_seal ps = seal_of(jb->f);

			rc = parity_ask(w->node[r->node].par, jb->h, &ps,
					jb->unfold, NULL);
		} else if (jb->kind == J_SEND) {
			struct par_seal ps = seal_of(jb->f);
			struct file_snap fs = snap_of(jb->f);
			uint64_t pieces = 0, bytes = 0;

			rc = parity_send(w->node[r->node].par, jb->h, &ps, &fs,
					 jb->unfold, NULL, bounce, NULL, NULL,
					 &pieces, &bytes);
		} else {
			rc = fold_at(w, jb->f, jb->h, jb->unfold, bounce,
				     r->faults ? TRIES : 1);
			if (rc > 0)
				r->rounds += rc;
		}
		if (rc < 0)
			atomic_store(&w->failing, true);
		if (rc < 0 && !r->errors++)
			snprintf(r->msg, sizeof(r->msg),
				 "node %d: %s of inode %" PRIu64 " seal %"
				 PRIu64 " at node %d: %s (%u chunks free "
				 "there)",
				 r->node, jb->unfold ? "unfold" : "fold",
				 jb->f->ino, jb->f->gseal, jb->h,
				 strerror(-rc),
				 w->node[jb->h].e
					 ? store_free_count(&w->node[jb->h].e->store)
					 : 0);
	}
	if (!bounce)
		r->errors++;
	free(bounce);
	return NULL;
}

/*
 * Run @jobs, one thread per owner (in the order given), and check them;
 * with @faults, folds retry.  Returns the rounds beyond the first.
 */
static int run_jobs(struct world *w, struct job *jobs, int njobs, bool faults)
{
	struct runner r[MAXN];
	int rounds = 0;

	memset(r, 0, sizeof(r));
	for (int i = 0; i < w->n; i++) {
		r[i].w = w;
		r[i].node = i;
		r[i].faults = faults;
		r[i].jobs = calloc((size_t)njobs + 1, sizeof(struct job));
		assert_non_null(r[i].jobs);
	}
	for (int j = 0; j < njobs; j++) {
		struct runner *ri = &r[jobs[j].f->owner];

		ri->jobs[ri->njobs++] = jobs[j];
	}
	for (int i = 0; i < w->n; i++)
		assert_int_equal(pthread_create(&r[i].thread, NULL,
						runner_main, &r[i]), 0);
	for (int i = 0; i < w->n; i++)
		pthread_join(r[i].thread, NULL);
	for (int i = 0; i < w->n; i++) {
		if (r[i].errors)
			fprintf(stderr, "%s: %d errors, first: %s\n", w->name,
				r[i].errors, r[i].msg);
		assert_int_equal(r[i].errors, 0);
		rounds += r[i].rounds;
		free(r[i].jobs);
	}
	return rounds;
}

static void shuffle_jobs(struct world *w, struct job *jobs, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)rnd(w, (uint64_t)i + 1);
		struct job t = jobs[i];

		jobs[i] = jobs[j];
		jobs[j] = t;
	}
}

/* --- the model ------------------------------------------------------------ */

/* The folded piece in data slot @slot of @ckpt's @stripe, or NULL. */
static struct pfile *member(struct world *w, uint64_t ckpt, uint64_t stripe,
			    int slot, uint32_t *idx)
{
	struct pfile *hit = NULL;
	uint64_t chunk;
	int node;

	assert_int_equal(ers_layout_chunk(&w->l, stripe, slot, &node, &chunk),
			 0);
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (!f->folded || f->owner != node || f->ckpt != ckpt ||
		    chunk < f->base || chunk >= f->base + f->npieces)
			continue;
		assert_null(hit); /* chunk numbers are never given twice */
		hit = f;
		*idx = (uint32_t)(chunk - f->base);
	}
	return hit;
}

static uint64_t max_stripe(struct world *w, uint64_t ckpt)
{
	uint64_t mx = 0;

	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];
		uint64_t s;

		if (f->ckpt != ckpt || !f->gseal)
			continue;
		s = ers_layout_stripes(&w->l, f->owner, f->base + f->npieces);
		mx = s > mx ? s : mx;
	}
	return mx;
}

/* Any live node but @h. */
static int other_live(struct world *w, int h)
{
	for (int t = 0; t < 4 * w->n; t++) {
		int q = (int)rnd(w, (uint64_t)w->n);

		if (q != h && w->node[q].live)
			return q;
	}
	for (int q = 0; q < w->n; q++)
		if (q != h && w->node[q].live)
			return q;
	fail_msg("no live node but %d", h);
	return -1;
}

/* PAR_T_GET of @ckpt's @stripe at @h, from node @from, over the transport. */
static int rpc_get(struct world *w, int from, int h, uint64_t ckpt,
		   uint64_t stripe, uint32_t code, uint8_t *meta,
		   uint32_t *meta_len, uint8_t *row)
{
	uint8_t req[24];
	struct peer_frame f = { .type = PAR_T_GET, .meta = req,
				.meta_len = sizeof(req) };
	struct peer_reply rep = { .meta = meta,
				  .meta_cap = 8 + ERS_MAX_K * 32,
				  .bulk = row, .bulk_cap = CLEN };
	int rc;

	rft_put_le64(req, ckpt);
	rft_put_le64(req + 8, stripe);
	rft_put_le32(req + 16, code);
	rft_put_le32(req + 20, 0);
	rc = peer_call(w->node[from].x, h, &f, &rep, CALL_MS);
	if (rc == 0) {
		/* The row's bytes (4 KiB and up): zeros past them. */
		*meta_len = rep.meta_len;
		assert_true(rep.bulk_len >= 4096 && rep.bulk_len <= CLEN);
		assert_int_equal(rep.bulk_crc,
				 ers_crc32c(0, row, rep.bulk_len));
		memset(row + rep.bulk_len, 0, CLEN - rep.bulk_len);
		w->row_len = rep.bulk_len;
	}
	return rc;
}

/*
 * PAR_T_GET of @ckpt's @stripe straight from @h's parity_rx_get, as the
 * shim would on its receive thread; the same answer as rpc_get.
 */
static int direct_get(struct world *w, int from, int h, uint64_t ckpt,
		      uint64_t stripe, uint8_t *meta, uint32_t *meta_len,
		      uint8_t *row)
{
	uint8_t req[24], *am = NULL, *ab = NULL;
	uint32_t aml = 0, abl = 0;
	struct peer_frame f = { .type = PAR_T_GET, .meta = req,
				.meta_len = sizeof(req) };
	int rc;

	rft_put_le64(req, ckpt);
	rft_put_le64(req + 8, stripe);
	rft_put_le32(req + 16, w->code);
	rft_put_le32(req + 20, 0);
	rc = parity_rx_get(w->node[h].par, from, &f, &am, &aml, &ab, &abl);
	if (rc == 0) {
		assert_true(aml <= 8 + ERS_MAX_K * 32);
		assert_true(abl >= 4096 && abl <= CLEN);
		memcpy(meta, am, aml);
		memcpy(row, ab, abl);
		memset(row + abl, 0, CLEN - abl);
		w->row_len = abl;
		*meta_len = aml;
		free(am);
		free(ab);
	}
	return rc;
}

/*
 * The model's member table of a stripe (as PAR_T_GET gives it, row 0),
 * and its members' bytes in w->data.  False when it has none.
 */
static bool model_members(struct world *w, uint64_t ckpt, uint64_t stripe,
			  uint8_t *meta)
{
	bool any = false;

	memset(meta, 0, 8 + 32 * (size_t)w->k);
	rft_put_le32(meta, (uint32_t)w->k);
	for (int x = 0; x < w->k; x++) {
		uint32_t idx = 0;
		struct pfile *f = member(w, ckpt, stripe, x, &idx);
		uint8_t *e = meta + 8 + 32 * x;

		if (!f) {
			memset(w->data[x], 0, CLEN);
			continue;
		}
		any = true;
		piece_bytes(f, idx, w->data[x]);
		rft_put_le64(e, f->ino);
		rft_put_le64(e + 8, f->gseal);
		rft_put_le32(e + 16, idx);
		rft_put_le32(e + 20,
			     piece_hole(f, idx) ? 0 : piece_len(f, idx));
		rft_put_le32(e + 24, piece_hole(f, idx) ? 0 : f->crc[idx]);
		rft_put_le32(e + 28, 1);
	}
	return any;
}

static void dump_members(struct world *w, const uint8_t *got)
{
	for (int x = 0; x < w->k; x++) {
		const uint8_t *g = got + 8 + 32 * x;

		fprintf(stderr,
			"  slot %d: ino %" PRIu64 " gseal %" PRIu64
			" piece %u len %u crc %08x in %u\n",
			x, rft_get_le64(g), rft_get_le64(g + 8),
			rft_get_le32(g + 16), rft_get_le32(g + 20),
			rft_get_le32(g + 24), rft_get_le32(g + 28));
	}
}

/*
 * The least memory a row holding a member of @len bytes takes: a block of
 * 4 KiB << c up to half a chunk, else a chunk.  (A row grows to fit the
 * members folded into it and does not shrink as they leave.)
 */
static uint64_t row_least(uint32_t len)
{
	uint64_t b = 4096;

	if (len > CLEN / 2)
		return CLEN;
	while (b < len)
		b <<= 1;
	return b;
}

/*
 * Every live holder's rows against the model: the bytes ers_encode gives
 * from the members, the member table, no row where there is no member,
 * the rows counted, each at least as long as its longest member, and every
 * chunk of each arena accounted for.
 */
static void check_rows(struct world *w, const char *when)
{
	uint8_t meta[8 + ERS_MAX_K * 32], got[8 + ERS_MAX_K * 32];
	uint64_t rows[MAXN] = { 0 }, least[MAXN] = { 0 };
	uint32_t mlen;

	w->phase = when;
	if (getenv("PARITY_VERBOSE"))
		fprintf(stderr, "%s: %.2f s: %s\n", w->name,
			(double)(now_ms() - w->t0) / 1000.0, when);
	for (int c = 0; c < NCKPT; c++) {
		uint64_t top = max_stripe(w, ckpt_ino[c]) + 2;

		for (uint64_t s = 0; s < top; s++) {
			bool any = model_members(w, ckpt_ino[c], s, meta);

			if (any)
				assert_int_equal(
					ers_encode(w->c, CLEN,
						   (const uint8_t *const *)
							   w->data,
						   w->par),
					0);
			for (int r = 0; r < w->m; r++) {
				int h = ers_layout_node(&w->l, s, w->k + r);
				int rc;

				if (!w->node[h].live)
					continue;
				/* Some over the transport, the rest
				   (cheaper) straight. */
				rc = rnd(w, 3) == 0
					? rpc_get(w, other_live(w, h), h,
						  ckpt_ino[c], s, w->code,
						  got, &mlen, w->row)
					: direct_get(w, other_live(w, h), h,
						     ckpt_ino[c], s, got,
						     &mlen, w->row);
				if (!any) {
					if (rc != -ENOENT)
						fail_msg("%s %s: node %d has a "
							 "row of stripe %"
							 PRIu64 " ckpt %"
							 PRIu64 " with no "
							 "member: %d",
							 w->name, when, h, s,
							 ckpt_ino[c], rc);
					continue;
				}
				if (rc != 0)
					fail_msg("%s %s: GET of stripe %" PRIu64
						 " ckpt %" PRIu64
						 " at node %d: %d",
						 w->name, when, s, ckpt_ino[c],
						 h, rc);
				assert_int_equal(mlen, 8 + 32 * (uint32_t)w->k);
				rft_put_le32(meta + 4, (uint32_t)r);
				if (memcmp(got, meta, mlen)) {
					fprintf(stderr, "got:\n");
					dump_members(w, got);
					fprintf(stderr, "the model:\n");
					dump_members(w, meta);
					fail_msg("%s %s: members of stripe %"
						 PRIu64 " ckpt %" PRIu64
						 " row %d at node %d unlike "
						 "the model (PARITY_SEED=%"
						 PRIu64 ")",
						 w->name, when, s, ckpt_ino[c],
						 r, h, base_seed);
				}
				if (memcmp(w->par[r], w->row, CLEN))
					fail_msg("%s %s: row %d of stripe %"
						 PRIu64 " ckpt %" PRIu64
						 " at node %d is not the "
						 "encoding of its members "
						 "(PARITY_SEED=%" PRIu64 ")",
						 w->name, when, r, s,
						 ckpt_ino[c], h, base_seed);
				{
					uint32_t longest = 0;

					for (int x = 0; x < w->k; x++) {
						uint32_t n = rft_get_le32(
							meta + 8 + 32 * x + 20);

						if (n > longest)
							longest = n;
					}
					least[h] += row_least(longest);
				}
				rows[h]++;
				w->rows_checked++;
			}
		}
	}
	for (int h = 0; h < w->n; h++) {
		struct pnode *nd = &w->node[h];
		struct eng_protect_stats st;

		if (!nd->live)
			continue;
		memset(&st, 0, sizeof(st));
		parity_get_stats(nd->par, &st);
		if (st.parity_rows != rows[h])
			fail_msg("%s %s: node %d holds %" PRIu64 " rows, the "
				 "model %" PRIu64 " (PARITY_SEED=%" PRIu64 ")",
				 w->name, when, h, st.parity_rows, rows[h],
				 base_seed);
		assert_true(st.parity_bytes >= least[h]);
		assert_true(st.parity_bytes <= rows[h] * CLEN);
		/* Every frame of ours was one parity takes (or drops). */
		assert_int_equal(atomic_load(&nd->rx_refused), 0);
		/*
		 * No chunk lost: data (whole chunks), rows, and nothing else.
		 * Rows are whole chunks or blocks, and blocks here are rows
		 * only: the chunks shared by blocks and the rows' bytes in
		 * whole chunks account for every chunk not free.
		 */
		{
			uint32_t slabs;
			uint64_t small;

			store_usage(&nd->e->store, &slabs, &small);
			assert_true(st.parity_bytes >= small);
			assert_int_equal((st.parity_bytes - small) % CLEN, 0);
			assert_int_equal(
				store_free_count(&nd->e->store),
				nd->e->store.nchunks -
					(uint32_t)data_chunks(w, h) -
					(uint32_t)((st.parity_bytes - small) /
						   CLEN) -
					slabs);
		}
	}
}

/* --- reading what a lost node had ----------------------------------------- */

/* parity_get_fn: a member's piece from its owner, checked (file_piece_copy). */
static int model_get(void *ctx, int node, uint64_t ino, uint64_t gseal,
		     uint32_t idx, uint32_t len, uint32_t crc, uint8_t *buf,
		     const struct timespec *deadline)
{
	struct world *w = ctx;
	struct store *st;

	(void)deadline;
	atomic_fetch_add(&w->gets, 1);
	if (node < 0 || node >= w->n || w->lost[node] || !w->node[node].live) {
		atomic_fetch_add(&w->gets_refused, 1);
		return -ENOTCONN;
	}
	st = &w->node[node].e->store;
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];
		const struct slot *s;

		if (f->owner != node || f->ino != ino || f->gseal != gseal ||
		    !f->present)
			continue;
		if (idx >= f->npieces || piece_len(f, idx) != len)
			return -ENOENT;
		memset(buf, 0, len);
		s = idx < f->nslots ? &f->slots[idx] : NULL;
		if (s && slot_in_ram(s))
			memcpy(buf, store_ptr(st, s->chunk),
			       s->fill < len ? s->fill : len);
		return ers_crc32c(0, buf, len) == crc ? 0 : -EIO;
	}
	return -ENOENT;
}

/*
 * Can piece @i of @f be decoded with the nodes in @lost gone?  What
 * parity_rebuild_piece must manage: the rows of live holders that hold
 * the piece (not those of the replacements in @partial, folded again by
 * the live owners only), one per unknown data member (the target, and
 * members that are not zeros and whose owner is gone).
 */
static bool decodable(struct world *w, const struct pfile *f, uint32_t i,
		      const bool *lost, uint64_t partial)
{
	uint64_t stripe;
	int slot, rows = 0, unknown = 1;

	assert_int_equal(ers_layout_locate(&w->l, f->owner, f->base + i,
					   &stripe, &slot),
			 0);
	for (int r = 0; r < w->m; r++) {
		int h = ers_layout_node(&w->l, stripe, w->k + r);

		rows += !lost[h] && !(partial & (1ULL << h));
	}
	for (int x = 0; x < w->k; x++) {
		uint32_t idx;
		struct pfile *g;

		if (x == slot)
			continue;
		g = member(w, f->ckpt, stripe, x, &idx);
		if (g && !piece_hole(g, idx) && piece_len(g, idx) &&
		    lost[g->owner])
			unknown++;
	}
	return rows >= unknown;
}

static struct eng_piece piece_of(struct world *w, const struct pfile *f,
				 uint32_t i)
{
	return (struct eng_piece){ .ino = f->ino, .gseal = f->gseal,
				   .holders = 1ULL << f->owner, .idx = i,
				   .len = piece_len(f, i), .crc = f->crc[i],
				   .owner = f->owner, .scheme = w->code,
				   .stripe_ckpt = f->ckpt,
				   .chunk_base = f->base };
}

/* Does @a's view hold every live node UP, as it is? */
static bool view_clean(struct world *w, int a)
{
	for (int b = 0; b < w->n; b++)
		if (b != a && w->node[b].live && !sees_up(w, a, b))
			return false;
	return true;
}

/* One piece to rebuild, and how it went. */
struct rb_task {
	struct pfile *f;
	uint32_t i;
	int rb;			/* the node that rebuilds it */
	bool want_ok;		/* the model: decodable */
	int rc;
	bool wrong;		/* 0 with other bytes than the piece's */
};

struct rb_pool {
	struct world *w;
	struct rb_task *t;
	int n;
	_Atomic int next;
};

static void rebuild_one(struct world *w, struct rb_task *t, uint8_t *buf,
			uint8_t *want)
{
	struct eng_piece pc = piece_of(w, t->f, t->i);
	struct timespec deadline;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += 20;
	memset(buf, 0xa5, CLEN);
	t->rc = parity_rebuild_piece(w->node[t->rb].par, &pc, buf, &deadline,
				     model_get, w);
	piece_bytes(t->f, t->i, want);
	t->wrong = t->wrong || (t->rc == 0 && memcmp(buf, want, pc.len));
}

/* Rebuilds from several threads at once: readers of one stripe meet. */
static void *rb_main(void *arg)
{
	struct rb_pool *p = arg;
	uint8_t *buf = malloc(CLEN), *want = malloc(CLEN);
	int j;

	while (buf && want && (j = atomic_fetch_add(&p->next, 1)) < p->n)
		rebuild_one(p->w, &p->t[j], buf, want);
	free(buf);
	free(want);
	return NULL;
}

/*
 * Rebuild every piece with bytes of every folded file of a node in @lost,
 * three at a time, the pieces of one stripe on one live node (so that
 * its readers meet): exactly what the model says is decodable, and never
 * wrong bytes.  Returns how many failed (as they must).
 */
static int check_rebuilds(struct world *w, const bool *lost, uint64_t partial,
			  const char *how)
{
	struct rb_task *t = calloc(MAXF * MAXP, sizeof(*t));
	struct rb_pool pool = { .w = w, .t = t };
	int live[MAXN], nlive = 0, failed = 0;
	uint64_t salt = splitmix(&w->rng);
	pthread_t th[3];

	assert_non_null(t);
	for (int i = 0; i < w->n; i++)
		if (!lost[i] && w->node[i].live)
			live[nlive++] = i;
	assert_true(nlive > 0);
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (!f->folded || !lost[f->owner])
			continue;
		for (uint32_t i = 0; i < f->npieces; i++) {
			uint64_t stripe, h;
			int slot;

			if (piece_hole(f, i))
				continue; /* zeros: nothing to rebuild */
			assert_int_equal(ers_layout_locate(&w->l, f->owner,
							   f->base + i,
							   &stripe, &slot),
					 0);
			h = salt ^ (stripe * 0x9e3779b97f4a7c15ull) ^ f->ckpt;
			h ^= h >> 29;
			t[pool.n++] = (struct rb_task){
				f, i, live[(h * 0xbf58476d1ce4e5b9ull >> 40) %
					   (uint64_t)nlive],
				decodable(w, f, i, lost, partial), 0, false
			};
		}
	}
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, rb_main, &pool),
				 0);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	for (int j = 0; j < pool.n; j++) {
		struct rb_task *k = &t[j];

		if ((k->rc == 0) != k->want_ok && !view_clean(w, k->rb)) {
			/* A live node was suspected on a loaded machine:
			   once it is back, again. */
			assert_true(WAIT_FOR(view_clean(w, k->rb), WAIT_MS));
			rebuild_one(w, k, w->buf, w->want);
		}
		if (getenv("PARITY_VERBOSE"))
			fprintf(stderr, "%s %s: inode %" PRIu64 " piece %u "
				"(owner %d, chunk %" PRIu64 ") on %d: %d "
				"(%s)\n",
				w->name, how, k->f->ino, k->i, k->f->owner,
				k->f->base + k->i, k->rb, k->rc,
				k->want_ok ? "decodable" : "lost");
		if (k->wrong)
			fail_msg("%s %s: piece %u of inode %" PRIu64
				 " (owner %d) rebuilt on node %d: WRONG BYTES "
				 "(PARITY_SEED=%" PRIu64 ")",
				 w->name, how, k->i, k->f->ino, k->f->owner,
				 k->rb, base_seed);
		if ((k->rc == 0) != k->want_ok)
			fail_msg("%s %s: piece %u of inode %" PRIu64
				 " (owner %d, chunk %" PRIu64 ") rebuilt on "
				 "node %d: %d, the model says %s "
				 "(PARITY_SEED=%" PRIu64 ")",
				 w->name, how, k->i, k->f->ino, k->f->owner,
				 k->f->base + k->i, k->rb, k->rc,
				 k->want_ok ? "decodable" : "lost", base_seed);
		if (k->rc < 0 && k->rc != -EIO)
			fail_msg("%s %s: a rebuild that cannot be done fails "
				 "-EIO, not %d",
				 w->name, how, k->rc);
		failed += k->rc < 0;
	}
	w->rebuilt += (unsigned)(pool.n - failed);
	w->refused_ok += (unsigned)failed;
	free(t);
	return failed;
}

/*
 * Every folded file at the holders in @mask (replacements), but those of
 * owners in @skip (still gone); from owners in @mask, their rows elsewhere
 * are asked for (they outlived them).
 */
static void refold(struct world *w, uint64_t mask, uint64_t skip)
{
	struct job *jobs = calloc(MAXF * MAXN, sizeof(*jobs));
	uint8_t *bounce = malloc(CLEN);
	int nj = 0;

	assert_non_null(jobs);
	assert_non_null(bounce);
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (!f->folded || f->stale || (skip & (1ULL << f->owner)))
			continue;
		for (int h = 0; h < w->n; h++) {
			struct par_seal ps = seal_of(f);

			if (!(f->holders & (1ULL << h)))
				continue;
			if (mask & (1ULL << h)) {
				jobs[nj++] = (struct job){ f, h, false,
							   J_FOLD };
			} else if ((mask & (1ULL << f->owner)) &&
				   w->node[h].live) {
				/* Its rows elsewhere outlived the owner. */
				int rc = parity_ask(w->node[f->owner].par, h,
						    &ps, false, NULL);

				if (rc != 0)
					fail_msg("%s: inode %" PRIu64 " of "
						 "replaced node %d at node %d"
						 ": %d (PARITY_SEED=%" PRIu64
						 ")",
						 w->name, f->ino, f->owner, h,
						 rc, base_seed);
			}
		}
	}
	shuffle_jobs(w, jobs, nj);
	run_jobs(w, jobs, nj, false);
	free(bounce);
	free(jobs);
}

/* Start replacements for @mask, then fold into @refold but from @skip. */
static void replace(struct world *w, uint64_t mask, uint64_t refold_mask,
		    uint64_t skip)
{
	w->phase = "replacing nodes";
	for (int i = 0; i < w->n; i++)
		if (mask & (1ULL << i)) {
			node_start(w, i);
			for (int j = 0; j < w->nf; j++)
				if (w->f[j].owner == i && w->f[j].exists)
					pf_load(w, &w->f[j]);
		}
	assert_true(WAIT_FOR(all_up(w), WAIT_MS));
	refold(w, refold_mask, skip);
}

/*
 * Lose the nodes in @lost and rebuild what they owned; replace them.
 * Those in @partial are replaced first, and folded into by the live
 * owners only, before the rebuilds: their rows lack the lost pieces.
 */
static void lose(struct world *w, const bool *lost_in, bool detected,
		 uint64_t partial)
{
	uint64_t mask = 0;
	bool gone[MAXN], lost[MAXN];
	int nl = 0, failed;
	char how[96];

	memcpy(lost, lost_in, sizeof(lost));
	for (int i = 0; i < w->n; i++)
		if (lost[i]) {
			mask |= 1ULL << i;
			nl++;
		}
	snprintf(how, sizeof(how),
		 "losing %d node%s (mask %#" PRIx64 ", %#" PRIx64
		 " back empty)%s",
		 nl, nl > 1 ? "s" : "", mask, partial,
		 detected ? ", seen dead" : "");
	w->phase = "losing nodes";
	if (getenv("PARITY_VERBOSE"))
		fprintf(stderr, "%s: %.2f s: %s\n", w->name,
			(double)(now_ms() - w->t0) / 1000.0, how);
	for (int i = 0; i < w->n; i++)
		if (lost[i])
			node_kill(w, i);
	if (partial) {
		replace(w, partial, partial, mask & ~partial);
		for (int i = 0; i < w->n; i++)
			lost[i] = lost[i] && !(partial & (1ULL << i));
	}
	memcpy(gone, lost, sizeof(gone));
	memcpy(w->lost, lost, sizeof(w->lost));
	w->phase = "rebuilding";
	/* At once: the survivors' views still say UP (or SUSPECT). */
	failed = check_rebuilds(w, gone, partial, how);
	if (nl <= w->m && !partial)
		assert_int_equal(failed, 0);
	if (detected) {
		for (int i = 0; i < w->n; i++)
			if (!gone[i])
				assert_true(WAIT_FOR(sees_dead(w, i, gone),
						     WAIT_MS));
		failed = check_rebuilds(w, gone, partial, how);
		if (nl <= w->m && !partial)
			assert_int_equal(failed, 0);
	}
	/* Replacements start empty; the owners fold into them again. */
	memset(w->lost, 0, sizeof(w->lost));
	replace(w, mask & ~partial, mask, 0);
}

/* --- malformed folds ------------------------------------------------------ */

static void fold_meta(uint8_t *m, uint64_t ckpt, uint64_t stripe,
		      uint64_t ino, uint64_t gseal, uint32_t code,
		      uint32_t slot, uint32_t piece, uint32_t len,
		      uint32_t crc)
{
	rft_put_le64(m, ckpt);
	rft_put_le64(m + 8, stripe);
	rft_put_le64(m + 16, ino);
	rft_put_le64(m + 24, gseal);
	rft_put_le32(m + 32, code);
	rft_put_le32(m + 36, slot);
	rft_put_le32(m + 40, piece);
	rft_put_le32(m + 44, len);
	rft_put_le32(m + 48, crc);
	rft_put_le32(m + 52, 0);
}

static void send_frame(struct world *w, int from, int to, uint16_t type,
		       const uint8_t *meta, uint32_t meta_len,
		       const uint8_t *bulk, uint32_t bulk_len,
		       uint32_t bulk_crc)
{
	struct peer_frame f = { .type = type, .meta = meta,
				.meta_len = meta_len, .bulk = bulk,
				.bulk_len = bulk_len, .bulk_crc = bulk_crc };

	assert_int_equal(peer_send(w->node[from].x, to, &f, CALL_MS), 0);
}

static uint64_t folds_of(struct world *w, int h)
{
	struct eng_protect_stats st;

	memset(&st, 0, sizeof(st));
	parity_get_stats(w->node[h].par, &st);
	return st.parity_folds;
}

static uint64_t refused_of(struct world *w, int h)
{
	struct eng_protect_stats st;

	memset(&st, 0, sizeof(st));
	parity_get_stats(w->node[h].par, &st);
	return st.parity_refused;
}

/*
 * Frames a holder must not fold, and one it must: into a stripe far past
 * every file, so that whatever folds there shows as a row.
 */
static void check_malformed(struct world *w)
{
	uint8_t meta[FOLD_META + 8], got[8 + ERS_MAX_K * 32], *bulk;
	uint64_t chunk = 4096 + rnd(w, 1024), stripe, ck = ckpt_ino[0];
	uint64_t ino = 900000 + rnd(w, 1000), gseal = 800000 + rnd(w, 1000);
	uint32_t len = 1000 + (uint32_t)rnd(w, CLEN - 1000), crc, mlen;
	int a = (int)rnd(w, (uint64_t)w->n), slot, h, bslot, bnode, x;
	uint64_t folds, refused, bchunk;
	int nbad = 0;
	void *cookie;
	uint8_t *dst, need[1];
	struct par_seal ps;
	struct parity *pa;

	w->phase = "malformed folds";
	assert_int_equal(ers_layout_locate(&w->l, a, chunk, &stripe, &slot),
			 0);
	h = ers_layout_node(&w->l, stripe, w->k);	/* row 0 */
	pa = w->node[a].par;
	bslot = (slot + 1) % w->k;			/* another's slot */
	assert_int_equal(ers_layout_chunk(&w->l, stripe, bslot, &bnode,
					  &bchunk),
			 0);
	assert_int_not_equal(bnode, a);
	x = ers_layout_node(&w->l, stripe, bslot);	/* holds no row */
	assert_int_equal(x, bnode);
	bulk = malloc(CLEN + 1);
	assert_non_null(bulk);
	{
		uint64_t s = splitmix(&w->rng);

		for (uint32_t o = 0; o < CLEN + 1; o++)
			bulk[o] = (uint8_t)splitmix(&s);
	}
	crc = ers_crc32c(0, bulk, len);
	folds = folds_of(w, h);
	refused = refused_of(w, h);

	/* Another owner's slot. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)bslot, 0,
		  len, crc);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	/* Its own slot, from another node. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  len, crc);
	send_frame(w, bnode, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	nbad += 2;
	/* Another scheme: each part of the code in turn. */
	for (int b = 0; b < 4; b++) {
		fold_meta(meta, ck, stripe, ino, gseal,
			  w->code ^ (1u << (8 * b)), (uint32_t)slot, 0, len,
			  crc);
		send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len,
			   crc);
		nbad++;
	}
	/* The bulk's CRC not the one the meta names. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  len, crc);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len,
		   crc ^ 0x5a5a5a5au);
	/* More or fewer bytes than the meta says. */
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len - 1,
		   ers_crc32c(0, bulk, len - 1));
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len + 1,
		   ers_crc32c(0, bulk, len + 1));
	/* No bytes at all, for a piece that has some. */
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, NULL, 0, 0);
	/* Reserved bits. */
	rft_put_le32(meta + 52, 1);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	/* A slot out of range. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)w->k, 0,
		  len, crc);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	fold_meta(meta, ck, stripe, ino, gseal, w->code, UINT32_MAX, 0, len,
		  crc);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	/* More than a chunk. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  CLEN + 1, ers_crc32c(0, bulk, CLEN + 1));
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, CLEN + 1,
		   ers_crc32c(0, bulk, CLEN + 1));
	/* To a node that holds no row of that stripe. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  len, crc);
	send_frame(w, a, x, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	/* An UNFOLD of what is not there. */
	send_frame(w, a, h, PAR_T_UNFOLD, meta, FOLD_META, bulk, len, crc);
	nbad += 11;
	w->malformed += (unsigned)nbad;

	/* A GET goes after them on each link: nothing was folded. */
	assert_int_equal(rpc_get(w, a, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 -ENOENT);
	assert_int_equal(rpc_get(w, bnode, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 -ENOENT);
	assert_int_equal(rpc_get(w, h, x, ck, stripe, w->code, got, &mlen,
				 w->row),
			 -ENOENT);
	assert_int_equal(rpc_get(w, a, x, ck, stripe, w->code, got, &mlen,
				 w->row),
			 -ENOENT);
	/* GET and DONE with another scheme are refused. */
	assert_int_equal(rpc_get(w, a, h, ck, stripe, w->code ^ 1, got, &mlen,
				 w->row),
			 -EINVAL);
	ps = (struct par_seal){ ino, gseal, ck, chunk, 1 };
	assert_int_equal(parity_ask(pa, h, &ps, false, NULL), -EAGAIN);
	assert_int_equal(parity_ask(pa, h, &ps, true, NULL), 0);

	/* Straight into the holder: a bulk that failed its CRC on the way,
	   a link that died under it, a meta of another length. */
	{
		struct peer_frame f = { .type = PAR_T_FOLD, .meta = meta,
					.meta_len = FOLD_META, .bulk_len = len,
					.bulk_crc = crc };

		fold_meta(meta, ck, stripe, ino, gseal, w->code,
			  (uint32_t)slot, 0, len, crc);
		for (int t = 0; t < 2; t++) {
			uint32_t free0 = store_free_count(
				&w->node[h].e->store);

			cookie = NULL;
			dst = parity_rx_dest(w->node[h].par, a, &f, &cookie);
			assert_non_null(dst);
			assert_non_null(cookie);
			/* Received into the heap: the arena's chunks are for
			   rows (the last free one can still become a row). */
			assert_int_equal(store_free_count(&w->node[h].e->store),
					 free0);
			memcpy(dst, bulk, len);
			f.bulk = dst;
			assert_int_equal(parity_rx_fold(w->node[h].par, a, &f,
							cookie,
							t ? -ECONNRESET
							  : -EBADMSG),
					 0);
			f.bulk = NULL;
			assert_int_equal(store_free_count(&w->node[h].e->store),
					 free0);
		}
		f.meta_len = FOLD_META - 1;
		assert_null(parity_rx_dest(w->node[h].par, a, &f, &cookie));
		f.bulk = bulk;
		assert_int_equal(parity_rx_fold(w->node[h].par, a, &f, NULL,
						0),
				 -EPROTO);
		f.meta_len = FOLD_META + 8;
		memset(meta + FOLD_META, 0, 8);
		assert_int_equal(parity_rx_fold(w->node[h].par, a, &f, NULL,
						0),
				 -EPROTO);
	}
	assert_int_equal(rpc_get(w, a, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 -ENOENT);
	assert_int_equal(folds_of(w, h), folds);
	assert_true(refused_of(w, h) >= refused + 2);

	/* The same fold, well formed, does fold: the checks were not idle. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  len, crc);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len, crc);
	assert_int_equal(parity_ask(w->node[a].par, h, &ps, false, NULL), 0);
	assert_int_equal(parity_ask(w->node[a].par, h, &ps, true, NULL),
			 -EAGAIN);
	assert_int_equal(rpc_get(w, a, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 0);
	assert_int_equal(folds_of(w, h), folds + 1);
	assert_int_equal(rft_get_le64(got + 8 + 32 * slot), ino);
	assert_int_equal(rft_get_le64(got + 8 + 32 * slot + 8), gseal);
	assert_int_equal(rft_get_le32(got + 8 + 32 * slot + 20), len);
	assert_int_equal(rft_get_le32(got + 8 + 32 * slot + 24), crc);
	assert_int_equal(rft_get_le32(got + 8 + 32 * slot + 28), 1);
	for (int s = 0; s < w->k; s++) {
		memset(w->data[s], 0, CLEN);
		if (s == slot)
			memcpy(w->data[s], bulk, len);
	}
	assert_int_equal(ers_encode(w->c, CLEN,
				    (const uint8_t *const *)w->data, w->par),
			 0);
	assert_memory_equal(w->par[0], w->row, CLEN);
	/* UNFOLDs that do not name the member as folded are not taken:
	   another length, another seal, another slot's owner. */
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  len - 1, ers_crc32c(0, bulk, len - 1));
	send_frame(w, a, h, PAR_T_UNFOLD, meta, FOLD_META, bulk, len - 1,
		   ers_crc32c(0, bulk, len - 1));
	fold_meta(meta, ck, stripe, ino, gseal + 1, w->code, (uint32_t)slot,
		  0, len, crc);
	send_frame(w, a, h, PAR_T_UNFOLD, meta, FOLD_META, bulk, len, crc);
	fold_meta(meta, ck, stripe, ino, gseal, w->code, (uint32_t)slot, 0,
		  len, crc);
	send_frame(w, bnode, h, PAR_T_UNFOLD, meta, FOLD_META, bulk, len, crc);
	assert_int_equal(rpc_get(w, bnode, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 0);
	assert_int_equal(parity_ask(w->node[a].par, h, &ps, true, NULL),
			 -EAGAIN);
	assert_int_equal(rpc_get(w, a, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 0);
	assert_memory_equal(w->par[0], w->row, CLEN);
	assert_int_equal(rft_get_le32(got + 8 + 32 * slot + 28), 1);
	/* The right one is, and the row goes back to the store. */
	send_frame(w, a, h, PAR_T_UNFOLD, meta, FOLD_META, bulk, len, crc);
	assert_int_equal(parity_ask(pa, h, &ps, true, NULL), 0);
	assert_int_equal(rpc_get(w, a, h, ck, stripe, w->code, got, &mlen,
				 w->row),
			 -ENOENT);

	/*
	 * A holder with no memory refuses; DONE says so; later it folds.  No
	 * memory: no free chunk, and no free block a row of @len could take
	 * in a chunk that other rows share.
	 */
	{
		static uint32_t held[ARENA / CLEN + ARENA / 4096];
		uint32_t nheld = 0;
		struct store *st = &w->node[h].e->store;

		while (nheld < ARENA / CLEN &&
		       store_try_alloc(st, &held[nheld]) == 0)
			nheld++;
		assert_int_equal(store_free_count(st), 0);
		while (nheld < sizeof(held) / sizeof(held[0]) &&
		       store_try_alloc_len(st, len, &held[nheld]) == 0)
			nheld++;
		send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len,
			   crc);
		/* The holder says why, and which piece to send again. */
		need[0] = 0;
		assert_int_equal(parity_ask(pa, h, &ps, false, need), -ENOSPC);
		assert_int_equal(need[0] & 1, 1);
		assert_true(refused_of(w, h) >= refused + 3);
		while (nheld)
			store_put(st, held[--nheld]);
		assert_int_equal(parity_ask(pa, h, &ps, false, NULL), -ENOSPC);
		send_frame(w, a, h, PAR_T_FOLD, meta, FOLD_META, bulk, len,
			   crc);
		assert_int_equal(parity_ask(pa, h, &ps, false, need), 0);
		send_frame(w, a, h, PAR_T_UNFOLD, meta, FOLD_META, bulk, len,
			   crc);
		assert_int_equal(parity_ask(pa, h, &ps, true, NULL), 0);
	}
	free(bulk);
	check_rows(w, "after malformed folds");
}

/* --- scrub and a corrupt row ---------------------------------------------- */

/* Scrub (parity_scrub, from random nodes) finds every row good: a sample. */
static void check_scrub(struct world *w, const char *when)
{
	int left = 6;

	w->phase = when;
	for (int j = (int)rnd(w, (uint64_t)w->nf), t = 0; t < w->nf && left;
	     t++, j = (j + 1) % w->nf) {
		struct pfile *f = &w->f[j];
		struct eng_verify_info vi;
		struct eng_piece pc;

		if (!f->folded || !f->npieces)
			continue;
		left--;
		pc = piece_of(w, f, 0);
		memset(&vi, 0, sizeof(vi));
		parity_scrub(w->node[rnd(w, (uint64_t)w->n)].par, &pc,
			     f->npieces, model_get, w, &vi);
		if (vi.rows_bad || vi.rows_unchecked ||
		    vi.rows_checked != f->npieces * (uint32_t)w->m)
			fail_msg("%s %s: scrub of inode %" PRIu64 ": %u rows "
				 "checked, %u bad, %u unchecked; %u pieces",
				 w->name, when, f->ino, vi.rows_checked,
				 vi.rows_bad, vi.rows_unchecked, f->npieces);
		assert_true(vi.striped);
	}
}

/*
 * Where in @h's arena the row GET just gave (w->row_len bytes of w->row)
 * lives: the only whole chunk or small block in use that starts with them.
 * Rows of small stripes are blocks in slabs, so both are searched.
 */
static uint8_t *row_bytes(struct world *w, int h)
{
	struct store *st = &w->node[h].e->store;
	uint8_t *hit = NULL;
	unsigned hits = 0;

	/* Counted under the lock, asserted once it is given back. */
	pthread_mutex_lock(&st->lock);
	for (uint32_t id = 0; id < st->nchunks; id++) {
		struct slab *sl = st->slabs ? st->slabs[id] : NULL;
		uint8_t *p = store_ptr(st, id);

		if (!sl) {
			if (store_refs(st, id) &&
			    !memcmp(p, w->row, w->row_len)) {
				hits++;
				hit = p;
			}
			continue;
		}
		for (uint32_t b = 0; b < sl->nblocks; b++) {
			size_t cap = (size_t)1 << (STORE_UNIT_SHIFT + sl->cls);

			if (cap >= w->row_len &&
			    atomic_load(&sl->refs[b]) &&
			    !memcmp(p + b * cap, w->row, w->row_len)) {
				hits++;
				hit = p + b * cap;
			}
		}
	}
	pthread_mutex_unlock(&st->lock);
	assert_int_equal(hits, 1);
	return hit;
}

/*
 * A byte of every row of a stripe flipped in its holders' arenas: a piece
 * rebuilt from it fails its CRC (-EIO, counted), on every node, never
 * wrong bytes; scrub finds each row bad.  Put back, it rebuilds again.
 */
static void check_corrupt_rows(struct world *w)
{
	uint8_t got[8 + ERS_MAX_K * 32];
	struct pfile *f = NULL;
	uint32_t i = 0, mlen, off;
	uint8_t *hit[ERS_MAX_M];
	uint64_t stripe;
	int slot;
	struct eng_piece pc;
	struct timespec deadline;
	struct eng_verify_info vi;

	w->phase = "corrupt rows";
	assert_true(WAIT_FOR(all_up(w), WAIT_MS));
	for (int t = 0; t < 1000 && !f; t++) {
		struct pfile *g = &w->f[rnd(w, (uint64_t)w->nf)];
		uint32_t gi;

		if (!g->folded || !g->npieces)
			continue;
		gi = (uint32_t)rnd(w, g->npieces);
		if (piece_hole(g, gi) || g->fill[gi] == 0)
			continue;
		f = g;
		i = gi;
	}
	assert_non_null(f);
	assert_int_equal(ers_layout_locate(&w->l, f->owner, f->base + i,
					   &stripe, &slot),
			 0);
	off = (uint32_t)rnd(w, f->fill[i]);
	for (int r = 0; r < w->m; r++) {
		int h = ers_layout_node(&w->l, stripe, w->k + r);

		assert_int_equal(rpc_get(w, other_live(w, h), h, f->ckpt,
					 stripe, w->code, got, &mlen, w->row),
				 0);
		assert_true(off < w->row_len);
		hit[r] = row_bytes(w, h);
		hit[r][off] ^= 0x40;
	}
	/* Its owner gone (for the reads), rebuilt on each other node. */
	pc = piece_of(w, f, i);
	w->lost[f->owner] = true;
	for (int rb = 0; rb < w->n; rb++) {
		uint64_t crc0;

		if (rb == f->owner)
			continue;
		crc0 = atomic_load(&w->node[rb].e->cnt.crc_errors);
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += 20;
		memset(w->buf, 0xa5, CLEN);
		assert_int_equal(parity_rebuild_piece(w->node[rb].par, &pc,
						      w->buf, &deadline,
						      model_get, w),
				 -EIO);
		assert_int_equal(atomic_load(&w->node[rb].e->cnt.crc_errors),
				 crc0 + 1);
	}
	w->lost[f->owner] = false;

	/* Scrub finds them, from any node. */
	memset(&vi, 0, sizeof(vi));
	pc = piece_of(w, f, 0);
	parity_scrub(w->node[rnd(w, (uint64_t)w->n)].par, &pc, f->npieces,
		     model_get, w, &vi);
	assert_int_equal(vi.rows_bad, (uint32_t)w->m);
	assert_int_equal(vi.first_bad_stripe, stripe);
	assert_int_equal(vi.rows_unchecked, 0);
	assert_int_equal(vi.rows_checked, f->npieces * (uint32_t)w->m);

	for (int r = 0; r < w->m; r++) {
		hit[r][off] ^= 0x40;
	}
	pc = piece_of(w, f, i);
	w->lost[f->owner] = true;
	for (int rb = 0; rb < w->n; rb++) {
		if (rb == f->owner)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += 20;
		assert_int_equal(parity_rebuild_piece(w->node[rb].par, &pc,
						      w->buf, &deadline,
						      model_get, w),
				 0);
		piece_bytes(f, i, w->want);
		assert_memory_equal(w->buf, w->want, pc.len);
	}
	w->lost[f->owner] = false;
}

/* --- orphans -------------------------------------------------------------- */

static struct pfile *version_of(struct world *w, uint64_t ino, uint64_t gseal)
{
	for (int j = 0; j < w->nf; j++)
		if (w->f[j].ino == ino && w->f[j].gseal == gseal)
			return &w->f[j];
	return NULL;
}

/*
 * A node lost with its memory (after all the folding with faults: its
 * pieces are rebuilt from their stripes on the survivors), some of its
 * files unlinked meanwhile (it could not take them out of the rows: their
 * bytes went with it).  After its replacement, each holder marks its
 * members orphans (parity_node_lost); the refold's DONE from the
 * replacement makes its current files its own again; what is left must be
 * exactly the stale ones, which parity_drop_orphans takes out (each row
 * encoded anew from the other members; a list made before the DONEs
 * takes out no member they gave back): the rows then match the model
 * without them, and the scrub and the corrupt rows after this decode the
 * other members of their stripes.
 */
static void check_orphans(struct world *w)
{
	int a = (int)rnd(w, (uint64_t)w->n), nstale = 0;
	bool lost[MAXN] = { false };
	struct par_orphan *pre[MAXN] = { NULL };
	long npre[MAXN] = { 0 };

	w->phase = "a loss after all that";
	node_kill(w, a);
	lost[a] = true;
	memcpy(w->lost, lost, sizeof(w->lost));
	assert_int_equal(check_rebuilds(w, lost, 0, "a loss after all that"),
			 0);
	memset(w->lost, 0, sizeof(w->lost));
	w->phase = "orphans";
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (f->owner != a || !f->folded || !f->npieces || rnd(w, 2))
			continue;
		f->exists = false;
		f->stale = true;
		nstale++;
	}
	/* Its LOST, then its replacement and the refold (its DONEs). */
	for (int h = 0; h < w->n; h++)
		if (h != a)
			parity_node_lost(w->node[h].par, a);
	/*
	 * The sender's race with the refold (272 under ASan once): each
	 * holder lists its orphans before the replacement's DONEs come and
	 * judges them all stale.  Once the DONEs adopted the current ones, a
	 * drop of that list must take nothing out of a stripe with one of
	 * them (-EAGAIN: the next look finds it its owner's).
	 */
	for (int h = 0; h < w->n; h++) {
		if (h == a)
			continue;
		npre[h] = parity_orphans(w->node[h].par, &pre[h]);
		assert_true(npre[h] >= 0);
		for (long i = 0; i < npre[h]; i++)
			pre[h][i].stale = true;
	}
	replace(w, 1ULL << a, 1ULL << a, 0);
	for (int h = 0; h < w->n; h++) {
		uint64_t dropped = 0;
		bool current = false;
		int rc;

		if (h == a)
			continue;
		for (long i = 0; i < npre[h]; i++) {
			struct pfile *f = version_of(w, pre[h][i].ino,
						     pre[h][i].gseal);

			current |= !f || !f->stale;
		}
		rc = parity_drop_orphans(w->node[h].par, pre[h],
					 (size_t)npre[h], model_get, w,
					 &dropped);
		if (current ? rc != -EAGAIN : rc != 0)
			fail_msg("%s: node %d dropped orphans listed before "
				 "the DONEs%s: %s (PARITY_SEED=%" PRIu64 ")",
				 w->name, h,
				 current ? ", some its owner has again" : "",
				 strerror(-rc), base_seed);
		free(pre[h]);
	}
	for (int h = 0; h < w->n; h++) {
		struct par_orphan *o = NULL;
		uint64_t dropped = 0;
		long n;

		if (h == a)
			continue;
		n = parity_orphans(w->node[h].par, &o);
		assert_true(n >= 0);
		for (long i = 0; i < n; i++) {
			struct pfile *f = version_of(w, o[i].ino, o[i].gseal);

			if (!f || !f->stale || f->owner != a)
				fail_msg("%s: node %d holds inode %" PRIu64
					 " seal %" PRIu64 " as an orphan: "
					 "%s (PARITY_SEED=%" PRIu64 ")",
					 w->name, h, o[i].ino, o[i].gseal,
					 !f ? "no such version"
					 : f->stale ? "of another owner"
						    : "its owner has it",
					 base_seed);
			o[i].stale = true;
		}
		assert_int_equal(parity_drop_orphans(w->node[h].par, o,
						     (size_t)n, model_get, w,
						     &dropped),
				 0);
		assert_int_equal(dropped, (uint64_t)n);
		free(o);
		assert_int_equal(parity_orphans(w->node[h].par, &o), 0);
	}
	for (int j = 0; j < w->nf; j++)
		if (w->f[j].stale) {
			w->f[j].stale = false;
			w->f[j].folded = false;
		}
	if (getenv("PARITY_VERBOSE"))
		fprintf(stderr, "%s: node %d lost with %d files unlinked: "
			"their orphans taken out\n", w->name, a, nstale);
	check_rows(w, "after orphans were taken out");
	check_scrub(w, "scrub after orphans");
}

/* --- one world, start to end ---------------------------------------------- */

/* Lose sets of nodes: every m-set when there are few, else some; m + 1. */
static void lose_some(struct world *w)
{
	int n = w->n, m = w->m, total = 0, take;
	unsigned sets[1 << MAXN];
	bool lost[MAXN];

	for (unsigned mask = 1; mask < (1u << n); mask++)
		if (__builtin_popcount(mask) == m)
			sets[total++] = mask;
	for (int i = total - 1; i > 0; i--) {
		int j = (int)rnd(w, (uint64_t)i + 1);
		unsigned t = sets[i];

		sets[i] = sets[j];
		sets[j] = t;
	}
	take = total <= LOSS_SETS + 1 ? total : LOSS_SETS;
	for (int t = 0; t < take; t++) {
		for (int i = 0; i < n; i++)
			lost[i] = sets[t] & (1u << i);
		lose(w, lost, t == 0, 0);
		if (t == 0)
			check_rows(w, "after a loss and its replacement");
	}
	if (m > 1) {
		/* A single loss, too. */
		memset(lost, 0, sizeof(lost));
		lost[rnd(w, (uint64_t)n)] = true;
		lose(w, lost, false, 0);
	}
	/*
	 * An owner and a holder lost, the holder back (empty) and folded
	 * into again before the owner's pieces are read: its rows lack
	 * them, and are passed over.
	 */
	{
		int a = (int)rnd(w, (uint64_t)n), h;

		do
			h = (int)rnd(w, (uint64_t)n);
		while (h == a);
		memset(lost, 0, sizeof(lost));
		lost[a] = lost[h] = true;
		lose(w, lost, false, 1ULL << h);
		check_rows(w, "after a holder came back before a read");
	}
	/* One more than the code can take. */
	{
		int got = 0;

		memset(lost, 0, sizeof(lost));
		while (got < m + 1) {
			int i = (int)rnd(w, (uint64_t)n);

			if (!lost[i]) {
				lost[i] = true;
				got++;
			}
		}
		lose(w, lost, false, 0);
	}
	check_rows(w, "after the losses");
}

/* The world of the test running, for its teardown when it failed. */
static struct {
	struct world *w;
	struct job *jobs;
	struct watchdog wd;
	bool armed;
} cur;

static int teardown(void **state)
{
	(void)state;
	if (cur.w)
		world_free(cur.w);
	free(cur.jobs);
	if (cur.armed)
		wd_disarm(&cur.wd);
	memset(&cur, 0, sizeof(cur));
	return 0;
}

static void run_world(const char *name, const char *scheme, int n,
		      uint64_t salt)
{
	uint64_t seed = base_seed ^ (salt * 0x9e3779b97f4a7c15ull);
	uint64_t t0 = now_ms();
	struct pfile *list[MAXF];
	struct job *jobs;
	struct world *w;
	int nl = 0, nj = 0, nfiles, pieces = 0;

	w = cur.w = world_new(name, scheme, n, seed);
	wd_arm(&cur.wd, name, 240, world_report, w);
	cur.armed = true;
	jobs = cur.jobs = calloc(4 * MAXF * MAXN, sizeof(*jobs));
	assert_non_null(jobs);

	/* Files on every node, sealed in a random order, folded. */
	w->phase = "folding";
	for (int i = 0; i < n; i++) {
		int nf = 5 + (int)rnd(w, 2);

		for (int j = 0; j < nf; j++)
			list[nl++] = pf_new(w, i, 0,
					    j < 5 ? j : (int)rnd(w, 5));
	}
	nfiles = nl;
	seal_all(w, list, nl);
	for (int j = 0; j < nl; j++) {
		list[j]->folded = true;
		pieces += (int)list[j]->npieces;
		for (int h = 0; h < n; h++) {
			if (!(list[j]->holders & (1ULL << h)))
				continue;
			assert_int_not_equal(h, list[j]->owner);
			jobs[nj++] = (struct job){ list[j], h, false, J_SEND };
			if (!rnd(w, 4)) /* some twice */
				jobs[nj++] = (struct job){ list[j], h, false,
							   J_SEND };
		}
		if (list[j]->npieces)
			assert_int_not_equal(list[j]->holders, 0);
		else
			assert_int_equal(list[j]->holders, 0);
	}
	shuffle_jobs(w, jobs, nj);
	{
		int nsend = nj;

		/* Then every DONE: 0 at once, the folds went before it. */
		for (int j = 0; j < nsend; j++) {
			bool dup = false;

			for (int q = nsend; q < nj && !dup; q++)
				dup = jobs[q].f == jobs[j].f &&
				      jobs[q].h == jobs[j].h;
			if (!dup)
				jobs[nj++] = (struct job){ jobs[j].f,
							   jobs[j].h, false,
							   J_ASK };
		}
	}
	run_jobs(w, jobs, nj, false);

	/* The rows against the model. */
	check_rows(w, "after folding");
	check_scrub(w, "scrub after folding");

	/* What must not fold. */
	check_malformed(w);

	/* Losses, and replacements. */
	lose_some(w);

	/* Unlinks: their pieces leave the rows, empty rows go. */
	w->phase = "unfolding";
	nj = 0;
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (!f->folded || rnd(w, 3))
			continue;
		f->folded = false; /* the model, once they are out */
		for (int h = 0; h < n; h++)
			if (f->holders & (1ULL << h))
				jobs[nj++] = (struct job){ f, h, true, J_FOLD };
	}
	shuffle_jobs(w, jobs, nj);
	run_jobs(w, jobs, nj, false);
	for (int j = 0; j < w->nf; j++)
		if (!w->f[j].folded && w->f[j].exists) {
			pf_unload(w, &w->f[j]);
			w->f[j].exists = false;
		}
	check_rows(w, "after unfolding");

	/* Drops and delays: rewrites fold, more unlinks unfold. */
	w->phase = "folding with faults";
	nl = 0;
	for (int j = 0, top = w->nf; j < top; j++) {
		struct pfile *f = &w->f[j];

		if (!f->exists && !f->folded && rnd(w, 3))
			list[nl++] = pf_new(w, f->owner, f->ino,
					      (int)rnd(w, 5));
	}
	for (int i = 0; i < n; i++)
		list[nl++] = pf_new(w, i, 0, 4);
	seal_all(w, list, nl);
	nj = 0;
	for (int j = 0; j < nl; j++)
		for (int h = 0; h < n; h++)
			if (list[j]->holders & (1ULL << h))
				jobs[nj++] = (struct job){ list[j], h, false,
							   J_FOLD };
	for (int j = 0; j < w->nf; j++) {
		struct pfile *f = &w->f[j];

		if (!f->folded || rnd(w, 4))
			continue;
		f->folded = false;
		for (int h = 0; h < n; h++)
			if (f->holders & (1ULL << h))
				jobs[nj++] = (struct job){ f, h, true, J_FOLD };
	}
	shuffle_jobs(w, jobs, nj);
	peer_fakenet_delay(w->net, 0, 6);
	peer_fakenet_drop(w->net, 0.06);
	{
		int rounds = run_jobs(w, jobs, nj, true);

		print_message("%s: %d fold/unfold jobs with drops: %d "
			      "resends\n",
			      name, nj, rounds);
	}
	peer_fakenet_drop(w->net, 0);
	peer_fakenet_delay(w->net, 0, 2);
	for (int j = 0; j < nl; j++)
		list[j]->folded = true;
	for (int j = 0; j < w->nf; j++)
		if (!w->f[j].folded && w->f[j].exists) {
			pf_unload(w, &w->f[j]);
			w->f[j].exists = false;
		}
	assert_true(WAIT_FOR(all_up(w), WAIT_MS));
	check_rows(w, "after folding with faults");
	check_scrub(w, "scrub after faults");

	/* A loss after all that (leaving orphans), then a corrupt row. */
	check_orphans(w);
	check_corrupt_rows(w);

	print_message("%s: %d files (%d pieces) first, %d versions in all; "
		      "%u rows checked, %u pieces rebuilt, %u refused as "
		      "undecodable, %" PRIu64 " member reads (%" PRIu64
		      " refused), %u malformed frames; %.1f s\n",
		      name, nfiles, pieces, w->nf, w->rows_checked, w->rebuilt,
		      w->refused_ok, atomic_load(&w->gets),
		      atomic_load(&w->gets_refused), w->malformed,
		      (double)(now_ms() - t0) / 1000.0);
	w->phase = "stopping";
}

static void test_xor_3(void **state)
{
	(void)state;
	run_world("xor on 3", "xor", 3, 1);
}

static void test_xor_4(void **state)
{
	(void)state;
	run_world("xor on 4", "xor", 4, 2);
}

static void test_rs_2_2(void **state)
{
	(void)state;
	run_world("rs:2+2 on 4", "rs:2+2", 4, 3);
}

static void test_rs_4_2(void **state)
{
	(void)state;
	run_world("rs:4+2 on 6", "rs:4+2", 6, 4);
}

static void test_rs_2_1_on_4(void **state)
{
	(void)state;
	run_world("rs:2+1 on 4", "rs:2+1", 4, 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_xor_3, teardown),
		cmocka_unit_test_teardown(test_xor_4, teardown),
		cmocka_unit_test_teardown(test_rs_2_2, teardown),
		cmocka_unit_test_teardown(test_rs_4_2, teardown),
		cmocka_unit_test_teardown(test_rs_2_1_on_4, teardown),
	};
	const char *env = getenv("PARITY_SEED");

	if (env && *env) {
		base_seed = strtoull(env, NULL, 0);
	} else if (getrandom(&base_seed, sizeof(base_seed), 0) !=
		   sizeof(base_seed)) {
		base_seed = (uint64_t)time(NULL) ^ (uint64_t)getpid();
	}
	/* PARITY_TEST=glob runs only those (test_rs_4_2, test_xor_*). */
	if (getenv("PARITY_TEST"))
		cmocka_set_test_filter(getenv("PARITY_TEST"));
	rft_log_max = RFT_LOG_ERR; /* the rebuilds that must fail warn */
	printf("PARITY_SEED=%" PRIu64 "\n", base_seed);
	fflush(stdout);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
