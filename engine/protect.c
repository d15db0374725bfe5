/*
 * protect.c - a sealed file's copies on peers: --protect replicate:R.
 *
 * Once a file's seal has been applied on every live node (gns.c), its owner
 * sends each piece to the R - 1 holders that ers_replica_holders() places
 * its copies on, straight from the arena (the pieces pinned by a snapshot,
 * so the writer may go on and copy on write), paced by --protect-bw.  Each
 * holder receives a piece straight into an arena chunk of its own (counted
 * against its --mem), checks its CRC32C and makes it that file's piece; a
 * DONE request asks first which pieces it lacks, only those are sent, and
 * DONE asks again.  When every holder has every piece, the owner appends
 * PROTECT to the group's log: from then on every node knows where the
 * copies are (file->holders) and the file is PROTECTED.  A holder that is
 * down, full or behind leaves the file SEALED, and the owner tries again
 * later (backoff from 1 s to 30 s), sending only what it lacks; one that
 * refused a piece for want of memory says so in its answer, and the
 * owner logs it once per file and reports it (files_stalled).  The writer
 * never waits for any of it.
 *
 * Frames (docs/protocol.md, "Protection frames"), meta little-endian:
 *   PROT_T_PUT   u64 ino, u64 gseal, u32 piece, u32 len, u32 crc; bulk:
 *                the piece.  No answer: a piece refused (another seal,
 *                no memory) shows in the DONE that follows.
 *   PROT_T_DONE  u64 ino, u64 gseal.  Answered with a status and the
 *                pieces missing here (gns_i.h, PROT_MAP_BITS): status 0
 *                when every piece of that seal is here, EAGAIN when some
 *                are missing, ENOSPC when this node refused one of them
 *                for want of memory; -ESTALE (an error) when this node is
 *                at another seal of the file.
 * PUTs and their DONE go over one link, in order: a DONE answered 0 has
 * seen every PUT before it.
 *
 * Threads: one sender (the jobs, in order), one answerer (an rft_wq,
 * "rft-prot-ans": DONE and parity answers, in arrival order; a transport
 * thread must not wait on a socket).  p->lock is a leaf, never held across
 * an engine call or the network.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "erasure.h"
#include "group.h"
#include "group_i.h"
#include "gns_i.h"
#include "rft_wq.h"

#define PROT_SEND_MS 10000	/* one piece handed to the link */
#define PROT_RETRY_MIN_MS 1000
#define PROT_RETRY_MAX_MS 30000
#define PROT_LEAVE_RETRY_MS 250	/* retries while a graceful stop waits */
#define PROT_LEAVE_POLL_MS 100

/* --protect-bw: a token bucket, one per thread that sends or fetches. */
struct pacer {
	double tokens;
	uint64_t at_ms;
};

struct prot_job {
	struct prot_job *next;
	struct inode *in;	/* held */
	uint64_t gseal;
	uint64_t acked;		/* holders that have every piece */
	unsigned backoff_ms;
	uint64_t at_ms;		/* not before (a retry) */
	/* Its last try: a live holder that refused it (no memory), why. */
	int stall_holder;	/* -1: none */
	int stall_err;		/* -errno; 0: none */
	uint64_t warned;	/* holders whose refusal was logged */
};

struct prot_ans {
	struct rft_wq_item w;	/* on p->answers */
	struct protect *p;
	int node;
	struct peer_frame req;	/* meta unused */
	int rc;
	uint8_t *meta, *bulk;	/* malloc()ed, the answer's (PAR_T_GET) */
	uint32_t meta_len, bulk_len;
};

/*
 * xor, rs: a seal of a file owned here whose pieces are folded into the
 * holders' rows (or may be: a fold was sent).  Its pieces stay pinned
 * (@fs) until they are taken out again, when the file is rewritten,
 * unlinked or taken over: parity is never left counting bytes nobody has.
 * Only the sender thread adds or removes one.
 */
struct folded {
	struct folded *next;
	struct folded *enext;	/* on p->evicted; lock */
	bool evicted;		/* on p->evicted; lock */
	struct inode *in;	/* held */
	struct par_seal ps;
	struct file_snap fs;
	uint64_t holders;	/* nodes with rows of its stripes */
};

#define PROT_FOLDED_BUCKETS 1024

struct protect {
	struct eng *e;
	struct peer_xport *x;
	struct memb *memb;
	struct nslog *log;
	int self, nodes, r;
	int holders[64];	/* replicate: R - 1; xor, rs: every other */
	int nholders;
	struct parity *par;	/* xor, rs; NULL for replicate:R */
	parity_get_fn *get;	/* a stripe member's piece */
	void *get_ctx;
	char scheme[32];
	struct folded **folded;	/* by ino; lock */
	struct folded *evicted;	/* their pieces evicted: to take out; lock */
	uint64_t bw;		/* bytes/s; 0: no limit */
	struct pacer send_pace;	/* the sender thread's */
	struct pacer rebuild_pace; /* the rebuild thread's */

	pthread_mutex_t lock;
	pthread_cond_t cv;	/* sender: a job, stop */
	struct prot_job *head, *tail; /* lock */
	struct prot_job *later;	/* retries, lock */
	struct rft_wq *answers;	/* the answerer */
	unsigned queued;	/* jobs not yet done; lock */
	bool stop;		/* lock */
	bool leaving;		/* a graceful stop waits (protect_leave):
				   retries soon, no rebuild; lock */
	bool started;
	pthread_t sender;
	/*
	 * xor, rs: orphans may be in the rows here (a node lost its
	 * memory): the sender looks at @clean_at_ms, and every second
	 * while some are left (lock).
	 */
	bool orphans;
	uint64_t clean_at_ms;

	_Atomic uint64_t files_protected, pieces_sent, bytes_sent;
	_Atomic uint64_t pieces_held, bytes_held, pieces_refused;
	_Atomic uint64_t retries;
	/*
	 * A holder: per owner node, the last seal a copy's piece of which
	 * was refused here for want of memory; its DONE says so (lock).
	 */
	struct {
		uint64_t ino, gseal;
	} put_refused[GRP_MAX_NODES];

	/* The rebuild after a start with empty memory. */
	bool rebuilding;	/* its thread was started */
	bool rebuild_running;	/* and has not finished; lock */
	pthread_t rebuilder;
	uint64_t rebuild_files, rebuild_done; /* lock */
	_Atomic uint64_t rebuild_bytes, rebuild_failed, rebuild_lost;
};

/* --- holders: receiving ------------------------------------------------- */

static void ans_free(struct prot_ans *a)
{
	free(a->meta);
	free(a->bulk);
	free(a);
}

/* The answerer's item: send answer @w, or with @cancel drop it. */
static void send_answer(struct rft_wq_item *w, bool cancel);

/* Hand answer @a to @node's request @f to the answerer thread. */
static int queue_answer(struct protect *p, int node, const struct peer_frame *f,
			struct prot_ans *a)
{
	a->node = node;
	a->req = *f;
	a->req.meta = NULL;
	a->req.meta_len = 0;
	a->req.bulk = NULL;
	a->w.fn = send_answer;
	a->p = p;
	if (rft_wq_queue(p->answers, &a->w, RFT_WQ_HIGH) < 0)
		ans_free(a); /* stopping: the asker times out */
	return 0;
}

/*
 * A piece of @node's copy of @ino at seal @gseal refused here for want of
 * memory: noted for its DONE, logged once per seal.  Takes p->lock.
 */
static void put_refused(struct protect *p, int node, uint64_t ino,
			uint64_t gseal)
{
	bool news;

	if (node < 0 || node >= GRP_MAX_NODES)
		return;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	news = p->put_refused[node].ino != ino ||
	       p->put_refused[node].gseal != gseal;
	p->put_refused[node].ino = ino;
	p->put_refused[node].gseal = gseal;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	if (news)
		rft_warn("protect: a piece of node %d's inode %llu refused "
			 "here: no memory for its copy (it sends what is "
			 "missing again)",
			 node, (unsigned long long)ino);
}

/*
 * PROT_T_DONE's answer (gns_i.h): malloc()ed into *@meta, or -ESTALE,
 * -ENOMEM.  Never sleeps.
 */
static int done_answer(struct protect *p, int node, uint64_t ino,
		       uint64_t gseal, uint8_t **meta, uint32_t *meta_len)
{
	uint8_t *a = calloc(1, PROT_MAP_ANSWER_MAX);
	uint32_t n, nbits, why = EAGAIN;
	int rc;

	if (!a)
		return -ENOMEM;
	rc = file_replica_complete(p->e, ino, gseal, a + 8, PROT_MAP_BITS,
				   &n);
	if (rc < 0 && rc != -EAGAIN) {
		free(a);
		return rc;
	}
	nbits = rc == 0 ? 0 : n < PROT_MAP_BITS ? n : PROT_MAP_BITS;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	if (node >= 0 && node < GRP_MAX_NODES &&
	    p->put_refused[node].ino == ino &&
	    p->put_refused[node].gseal == gseal)
		why = ENOSPC;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	rft_put_le32(a, rc == 0 ? 0 : why);
	rft_put_le32(a + 4, nbits);
	*meta = a;
	*meta_len = 8 + (nbits + 7) / 8;
	return 0;
}

static void *rx_bulk_dest(void *ctx, int node, const struct peer_frame *f,
			  void **cookie)
{
	struct protect *p = ctx;
	const uint8_t *m = f->meta;
	uint32_t chunk;
	int rc;

	if ((f->type == PAR_T_FOLD || f->type == PAR_T_UNFOLD) && p->par)
		return parity_rx_dest(p->par, node, f, cookie);
	if (f->type != PROT_T_PUT || f->meta_len != 28 ||
	    f->bulk_len != rft_get_le32(m + 20) ||
	    f->bulk_crc != rft_get_le32(m + 24))
		return NULL;
	rc = file_replica_dest(p->e, rft_get_le64(m), rft_get_le64(m + 8),
			       rft_get_le32(m + 16), f->bulk_len,
			       rft_get_le32(m + 24), &chunk);
	if (rc == -ENOSPC)
		put_refused(p, node, rft_get_le64(m), rft_get_le64(m + 8));
	if (rc < 0)
		return NULL;
	*cookie = (void *)(uintptr_t)((uint64_t)chunk + 1);
	return store_ptr(eng_store(p->e), chunk);
}

static int rx_deliver(void *ctx, int node, const struct peer_frame *f,
		      void *cookie, int bulk_rc)
{
	struct protect *p = ctx;
	const uint8_t *m = f->meta;
	struct prot_ans *a;

	if (f->flags & PEER_F_REPLY)
		return -EPROTO;
	if (f->type >= PAR_T_FOLD && f->type <= PAR_T_GET) {
		if (!p->par)
			return -EPROTO; /* this node runs no parity */
		if (f->type == PAR_T_FOLD || f->type == PAR_T_UNFOLD)
			return parity_rx_fold(p->par, node, f, cookie,
					      bulk_rc);
		a = calloc(1, sizeof(*a));
		if (!a)
			return 0; /* the asker times out */
		/* Never sleeps: nothing waits holding par->lock. */
		a->rc = f->type == PAR_T_DONE
				? parity_rx_done(p->par, node, f, &a->meta,
						 &a->meta_len)
				: parity_rx_get(p->par, node, f, &a->meta,
						&a->meta_len, &a->bulk,
						&a->bulk_len);
		return queue_answer(p, node, f, a);
	}
	if (f->type == PROT_T_PUT) {
		if (f->meta_len != 28)
			return cookie ? 0 : -EPROTO;
		if (!cookie) {
			atomic_fetch_add(&p->pieces_refused, 1);
			return 0;
		}
		file_replica_install(p->e, rft_get_le64(m), rft_get_le64(m + 8),
				     rft_get_le32(m + 16),
				     (uint32_t)((uintptr_t)cookie - 1),
				     rft_get_le32(m + 24), bulk_rc == 0);
		if (bulk_rc == 0) {
			atomic_fetch_add(&p->pieces_held, 1);
			atomic_fetch_add(&p->bytes_held, f->bulk_len);
		}
		return 0;
	}
	if (f->type != PROT_T_DONE || f->meta_len != 16 || f->bulk_len)
		return -EPROTO;
	a = calloc(1, sizeof(*a));
	if (!a)
		return 0; /* the owner times out and tries again */
	/* Never sleeps: the checking takes locks no thread sleeps under. */
	a->rc = done_answer(p, node, rft_get_le64(m), rft_get_le64(m + 8),
			    &a->meta, &a->meta_len);
	return queue_answer(p, node, f, a);
}

static void send_answer(struct rft_wq_item *w, bool cancel)
{
	struct prot_ans *a = (struct prot_ans *)w;
	struct protect *p = a->p;

	if (cancel) {
		/* stopping: the asker times out */
	} else if (a->rc < 0) {
		peer_reply_err(p->x, a->node, &a->req, a->rc, PROT_SEND_MS);
	} else {
		struct peer_frame rep = { .meta = a->meta,
					  .meta_len = a->meta_len,
					  .bulk = a->bulk,
					  .bulk_len = a->bulk_len };

		if (a->bulk_len)
			rep.bulk_crc = ers_crc32c(0, a->bulk, a->bulk_len);
		peer_reply(p->x, a->node, &a->req, &rep, PROT_SEND_MS);
	}
	ans_free(a);
}

/* --- the owner: sending ------------------------------------------------- */

/*
 * Wait until --protect-bw lets @len more bytes go (a token bucket that
 * holds at most one second's worth; a piece larger than that waits for a
 * full bucket and leaves it in debt).  false when the module stops
 * meanwhile: the wait ends at once.  No engine lock held.
 */
static bool pace(struct protect *p, struct pacer *b, uint64_t len)
{
	double bw = (double)p->bw, want;
	bool go = true;

	if (!p->bw)
		return true;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	for (;;) {
		uint64_t now = rft_now_ms();

		if (p->stop) {
			go = false;
			break;
		}
		if (!b->at_ms)
			b->at_ms = now;
		b->tokens += (double)(now - b->at_ms) * bw / 1e3;
		b->at_ms = now;
		if (b->tokens > bw)
			b->tokens = bw;
		want = (double)len < bw ? (double)len : bw;
		if (b->tokens >= want) {
			b->tokens -= (double)len;
			break;
		}
		rft_cond_wait_until(
		    &p->cv, &p->lock,
		    now + 1 + (uint64_t)((want - b->tokens) * 1e3 / bw));
	}
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	return go;
}

/*
 * Ask @h whether it has every piece of @ino's seal @gseal (PROT_T_DONE):
 * 0, or its reason with @need set to the pieces it lacks (gns_i.h), or
 * -errno from the link.
 */
static int ask_copy(struct protect *p, int h, uint64_t ino, uint64_t gseal,
		    uint32_t n, uint8_t *need)
{
	uint8_t dmeta[16], *ans = malloc(PROT_MAP_ANSWER_MAX);
	struct peer_frame done = { .type = PROT_T_DONE, .meta = dmeta,
				   .meta_len = sizeof(dmeta) };
	struct peer_reply rep = { .meta = ans,
				  .meta_cap = PROT_MAP_ANSWER_MAX };
	int rc;

	if (!ans)
		return -ENOMEM;
	rft_put_le64(dmeta, ino);
	rft_put_le64(dmeta + 8, gseal);
	rc = peer_call(p->x, h, &done, &rep, PROT_SEND_MS);
	if (rc == 0)
		rc = prot_map_read(ans, rep.meta_len, n, need);
	free(ans);
	return rc;
}

/* A holder's answer that it refused what was sent (not a link's error). */
static bool refusal(int rc)
{
	return rc == -ENOSPC || rc == -ENOMEM || rc == -EBADMSG;
}

/*
 * Make @h hold every piece of @fs: ask which it lacks, send those, ask
 * again.  0 once it has them all; its reason (-EAGAIN, -ENOSPC: it
 * refused some for want of memory) or -errno from the link otherwise.
 */
static int send_to(struct protect *p, int h, uint64_t ino, uint64_t gseal,
		   const struct file_snap *fs, uint8_t *bounce)
{
	struct eng *e = p->e;
	uint32_t n = file_snap_npieces(e, fs);
	uint8_t meta[28], *need = malloc(n / 8 + 1);
	int rc;

	if (!need)
		return -ENOMEM;
	rc = ask_copy(p, h, ino, gseal, n, need);
	if (rc != -EAGAIN && !refusal(rc))
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		struct snap_piece sp;
		uint32_t len;
		struct peer_frame f = { .type = PROT_T_PUT, .meta = meta,
					.meta_len = sizeof(meta) };

		if (!prot_map_has(need, i))
			continue; /* there already */
		/* A spilled piece is read into @bounce. */
		rc = file_snap_piece_read(e, fs, i, bounce, &sp);
		if (rc < 0)
			goto out;
		if (rc == 0)
			continue; /* a hole: the holder has it from the seal */
		len = sp.len;
		f.bulk = sp.bytes;
		if (sp.fill < len) {
			/* Past fill the piece reads as zeros, not the chunk. */
			memcpy(bounce, sp.bytes, sp.fill);
			memset(bounce + sp.fill, 0, len - sp.fill);
			f.bulk = bounce;
		}
		f.bulk_len = len;
		f.bulk_crc = sp.crc;
		rft_put_le64(meta, ino);
		rft_put_le64(meta + 8, gseal);
		rft_put_le32(meta + 16, i);
		rft_put_le32(meta + 20, len);
		rft_put_le32(meta + 24, sp.crc);
		if (!pace(p, &p->send_pace, len)) {
			rc = -ECANCELED;
			goto out;
		}
		rc = peer_send(p->x, h, &f, PROT_SEND_MS);
		if (rc < 0)
			goto out;
		atomic_fetch_add(&p->pieces_sent, 1);
		atomic_fetch_add(&p->bytes_sent, len);
	}
	rc = ask_copy(p, h, ino, gseal, n, need);
out:
	free(need);
	return rc;
}

/*
 * Log, once per holder and job of @j's file (j->warned), that holder @h
 * refused its protection for @err, and note it in @j.  No lock held.
 */
static void warn_refused(struct protect *p, struct prot_job *j, int h,
			 int err)
{
	char rel[PATH_MAX];

	j->stall_holder = h;
	j->stall_err = err;
	if (j->warned & (1ULL << h))
		return;
	j->warned |= 1ULL << h;
	eng_inode_name(p->e, j->in, rel, sizeof(rel));
	rft_warn("protect: %s: node %d refused its %s (%s%s); tried again, "
		 "sending only what it lacks",
		 rel, h, p->par ? "parity folds" : "copy", strerror(-err),
		 err == -ENOSPC || err == -ENOMEM ? ": no memory there" : "");
}

/* Tell the group where the copies are: PROTECT through the log. */
static int announce(struct protect *p, uint64_t ino, uint64_t gseal,
		    uint64_t holders, uint32_t flags)
{
	struct nsop op;
	void *buf = NULL;
	size_t len = 0;
	int rc, result = 0;

	nsop_init(&op, NSOP_PROTECT);
	op.node = p->self;
	op.inc = eng_incarnation(p->e);
	op.ino = ino;
	op.gseal = gseal;
	op.holders = holders;
	op.flags = flags;
	rc = nsop_encode(&op, &buf, &len);
	if (rc == 0)
		rc = nslog_submit(p->log, buf, len, 10000, &result);
	free(buf);
	return rc < 0 ? rc : result;
}

/*
 * One pass over a job: 0 when done (protected, or moot: the file changed
 * or went), -errno when it must be tried again.
 */
static int run_job(struct protect *p, struct prot_job *j, uint8_t *bounce)
{
	struct eng *e = p->e;
	struct seal_view sv;
	struct file_snap fs;
	struct memb_view v;
	int rc = 0, first_err = 0;

	rc = file_seal_snap(e, j->in, j->gseal, p->self, 0, &sv, &fs);
	/* -ESTALE: a newer seal has a job of its own; -EAGAIN: not all
	 * here (a rebuild will bring it, then ask). */
	if (rc == -ESTALE || rc == -EAGAIN)
		return 0;
	if (rc < 0)
		return rc;
	memb_get_view(p->memb, &v);
	for (int k = 0; k < p->nholders; k++) {
		int h = p->holders[k];

		if (j->acked & (1ULL << h))
			continue;
		if (v.node[h].state != MEMB_UP) {
			first_err = first_err ? first_err : -EHOSTDOWN;
			continue;
		}
		rc = send_to(p, h, eng_inode_ino(j->in), j->gseal, &fs,
			     bounce);
		if (refusal(rc))
			warn_refused(p, j, h, rc);
		if (rc == 0)
			j->acked |= 1ULL << h;
		else if (!first_err)
			first_err = rc;
	}
	file_snap_drop(e, &fs);
	if (first_err)
		return first_err;
	rc = announce(p, eng_inode_ino(j->in), j->gseal,
		      j->acked | (1ULL << p->self), (uint32_t)p->r);
	if (rc == 0 || rc == -ESTALE || rc == -ENOENT) {
		if (rc == 0)
			atomic_fetch_add(&p->files_protected, 1);
		return 0;
	}
	return rc;
}

/* --- the owner: folding (xor, rs) ----------------------------------------- */

static size_t folded_bucket(uint64_t ino)
{
	return (size_t)(ino * 0x9E3779B97F4A7C15ULL >> 40) % PROT_FOLDED_BUCKETS;
}

static struct folded *folded_find(struct protect *p, const struct inode *in)
{
	struct folded *fo;

	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	fo = p->folded[folded_bucket(eng_inode_ino(in))];
	while (fo && fo->in != in)
		fo = fo->next;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	return fo;
}

static void folded_add(struct protect *p, struct folded *fo)
{
	size_t b = folded_bucket(eng_inode_ino(fo->in));

	eng_hold(p->e, fo->in);
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	fo->next = p->folded[b];
	p->folded[b] = fo;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
}

/* Forget @fo (its pieces unpinned); NULL unlinks nothing (protect_free). */
static void folded_free(struct protect *p, struct folded *fo, bool unlink)
{
	if (unlink) {
		struct folded **pp =
			&p->folded[folded_bucket(eng_inode_ino(fo->in))];

		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		while (*pp != fo)
			pp = &(*pp)->next;
		*pp = fo->next;
		for (pp = &p->evicted; *pp; pp = &(*pp)->enext)
			if (*pp == fo) {
				*pp = fo->enext;
				break;
			}
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	}
	file_snap_drop(p->e, &fo->fs);
	ns_unhold(p->e, fo->in);
	free(fo);
}

static bool pace_send(void *ctx, uint64_t len)
{
	struct protect *p = ctx;

	return pace(p, &p->send_pace, len);
}

/*
 * Fold (@gone false) or take out (@gone true) @fo's pieces at every live
 * holder not in *@acked; holders that confirm join *@acked.  Each is
 * asked first which pieces it lacks, and only those go (after a loss or
 * a refusal, most are there already).  A dead holder's rows went with it
 * (a replacement starts empty): skipped when taking out, an error when
 * folding.  0 when every holder confirmed; a holder that refused (no
 * memory) is logged once per job and set in @j.
 */
static int fold_at(struct protect *p, struct prot_job *j, struct folded *fo,
		   bool gone, uint64_t *acked, uint8_t *bounce)
{
	struct memb_view v;
	uint64_t pieces = 0, bytes = 0;
	uint8_t *need = malloc(fo->ps.npieces / 8 + 1);
	int first_err = 0;

	if (!need)
		return -ENOMEM;
	memb_get_view(p->memb, &v);
	for (int h = 0; h < p->nodes; h++) {
		int rc;

		if (!(fo->holders & (1ULL << h)) || (*acked & (1ULL << h)))
			continue;
		if (v.node[h].state != MEMB_UP) {
			if (gone && v.node[h].state == MEMB_DEAD)
				continue;
			first_err = first_err ? first_err : -EHOSTDOWN;
			continue;
		}
		rc = parity_ask(p->par, h, &fo->ps, gone, need);
		if (rc == -EAGAIN || refusal(rc)) {
			rc = parity_send(p->par, h, &fo->ps, &fo->fs, gone,
					 need, bounce, pace_send, p, &pieces,
					 &bytes);
			if (rc == 0)
				rc = parity_ask(p->par, h, &fo->ps, gone,
						need);
		}
		if (refusal(rc))
			warn_refused(p, j, h, rc);
		if (rc == 0)
			*acked |= 1ULL << h;
		else if (!first_err)
			first_err = rc;
	}
	free(need);
	atomic_fetch_add(&p->pieces_sent, pieces);
	atomic_fetch_add(&p->bytes_sent, bytes);
	return first_err;
}

/*
 * A job under xor or rs: take the pieces of a seal that is no longer the
 * file's out of the rows first (a rewrite, an unlink, another owner), then
 * fold the current seal's in and announce it.  0 when done, -errno to
 * try again.
 */
static int run_parity_job(struct protect *p, struct prot_job *j,
			  uint8_t *bounce)
{
	struct eng *e = p->e;
	struct folded *fo = folded_find(p, j->in);
	uint32_t code = parity_seal_code(p->par);
	struct seal_view v;
	uint64_t acked = 0;
	bool current;
	int rc;

	if (file_seal_view(e, j->in, &v) < 0)
		return 0;
	current = v.owner == p->self && v.gseal && v.unchanged && v.linked &&
		  v.scheme == code;
	/*
	 * Evicted pieces (the file is persisted) leave the rows too, so
	 * that their memory goes: the persist dir is its copy now.
	 */
	if (fo && (!current || fo->ps.gseal != v.gseal || !v.all_here)) {
		rc = fold_at(p, j, fo, true, &acked, bounce);
		if (rc < 0)
			return rc;
		folded_free(p, fo, true);
		fo = NULL;
		acked = 0;
	}
	if (!fo) {
		fo = calloc(1, sizeof(*fo));
		if (!fo)
			return -ENOMEM;
		/* Still current, and all here (else a rebuild brings it,
		 * then asks): -ESTALE or -EAGAIN, nothing to do now. */
		rc = file_seal_snap(e, j->in, j->gseal, p->self, code, &v,
				    &fo->fs);
		if (rc < 0) {
			free(fo);
			return rc == -ESTALE || rc == -EAGAIN ? 0 : rc;
		}
		fo->in = j->in;
		fo->ps = (struct par_seal){ eng_inode_ino(j->in), v.gseal,
					    v.stripe_ckpt, v.chunk_base,
					    v.npieces };
		fo->holders = parity_holders_of(p->par, p->self, fo->ps.base,
						fo->ps.npieces);
		/* Recorded before any fold goes: its bytes stay pinned. */
		folded_add(p, fo);
	} else if (!current || v.gseal != j->gseal) {
		return 0; /* a newer seal has a job of its own */
	}
	rc = fold_at(p, j, fo, false, &acked, bounce);
	if (rc < 0)
		return rc;
	/* The owner's bit too: LOST of this node makes it unprotected. */
	rc = announce(p, eng_inode_ino(j->in), j->gseal,
		      fo->holders | 1ULL << p->self, code);
	if (rc == 0 || rc == -ESTALE || rc == -ENOENT) {
		if (rc == 0)
			atomic_fetch_add(&p->files_protected, 1);
		return 0;
	}
	return rc;
}

static void job_free(struct protect *p, struct prot_job *j)
{
	ns_unhold(p->e, j->in);
	free(j);
}

/*
 * Is @ino at seal @gseal still?  Then its orphan stays: its owner's
 * rebuild brings its bytes back, or a later seal makes it stale.
 */
static bool seal_current(struct protect *p, uint64_t ino, uint64_t gseal)
{
	struct inode *in = eng_find_hold(p->e, ino);
	struct seal_view v;
	bool cur;

	if (!in)
		return false;
	cur = eng_inode_is_file(in) && file_seal_view(p->e, in, &v) == 0 &&
	      v.linked && v.gseal == gseal;
	ns_unhold(p->e, in);
	return cur;
}

/* The orphans in the rows here, each marked stale or not; -ENOMEM. */
static long list_orphans(struct protect *p, struct par_orphan **o,
			 uint64_t *stale)
{
	long n = parity_orphans(p->par, o);

	*stale = 0;
	for (long i = 0; i < n; i++) {
		(*o)[i].stale = !seal_current(p, (*o)[i].ino, (*o)[i].gseal);
		*stale += (*o)[i].stale;
	}
	return n;
}

/*
 * Take the stale orphans out of the rows here (parity.c, "Orphans").
 * True while orphans are left, stale or not.
 */
static bool clean_orphans(struct protect *p)
{
	struct par_orphan *o;
	uint64_t stale, dropped = 0;
	long n = list_orphans(p, &o, &stale);
	int rc = 0;

	if (n < 0)
		return true;
	if (stale)
		rc = parity_drop_orphans(p->par, o, (size_t)n, p->get,
					 p->get_ctx, &dropped);
	free(o);
	if (dropped)
		rft_info("parity: %llu piece%s that a node lost with its "
			 "memory, of seals no longer current, taken out of the "
			 "rows here (encoded anew from the other members)",
			 (unsigned long long)dropped, dropped == 1 ? "" : "s");
	if (rc < 0)
		rft_dbg("parity: %llu orphans not taken out yet: %s",
			(unsigned long long)(stale - dropped), strerror(-rc));
	return (uint64_t)n > dropped;
}

static void *sender_main(void *arg)
{
	struct protect *p = arg;
	uint8_t *bounce = malloc(RFT_CHUNK_MAX);

	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	while (!p->stop) {
		uint64_t now = rft_now_ms(), next = now + 1000;
		struct prot_job *j, **pp;
		int rc;

		for (pp = &p->later; *pp;) {
			j = *pp;
			if (j->at_ms <= now) {
				*pp = j->next;
				j->next = NULL;
				if (p->tail)
					p->tail->next = j;
				else
					p->head = j;
				p->tail = j;
			} else {
				next = j->at_ms < next ? j->at_ms : next;
				pp = &j->next;
			}
		}
		if (p->orphans && p->clean_at_ms <= now) {
			bool left;

			leaf_unlock(&p->lock, ENG_RANK_PROTECT);
			left = clean_orphans(p);
			leaf_lock(&p->lock, ENG_RANK_PROTECT);
			p->orphans = left;
			p->clean_at_ms = rft_now_ms() + 1000;
			continue;
		}
		if (p->orphans && p->clean_at_ms < next)
			next = p->clean_at_ms;
		if (p->evicted) {
			struct folded *fo = p->evicted;

			p->evicted = fo->enext;
			fo->evicted = false;
			/* Records are freed by this thread only: @fo stays. */
			leaf_unlock(&p->lock, ENG_RANK_PROTECT);
			protect_file(p, fo->in, 0);
			leaf_lock(&p->lock, ENG_RANK_PROTECT);
			continue;
		}
		j = p->head;
		if (!j) {
			rft_cond_wait_until(&p->cv, &p->lock, next);
			continue;
		}
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
		j->stall_holder = -1;
		j->stall_err = 0;
		rc = !bounce	? -ENOMEM
		     : p->par	? run_parity_job(p, j, bounce)
				: run_job(p, j, bounce);
		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		if (rc == 0 || p->stop) {
			p->queued--;
			leaf_unlock(&p->lock, ENG_RANK_PROTECT);
			job_free(p, j);
			leaf_lock(&p->lock, ENG_RANK_PROTECT);
			continue;
		}
		atomic_fetch_add(&p->retries, 1);
		rft_dbg("inode %llu: protection to try again: %s",
			(unsigned long long)eng_inode_ino(j->in),
			strerror(-rc));
		j->backoff_ms = j->backoff_ms ? j->backoff_ms * 2
					      : PROT_RETRY_MIN_MS;
		if (j->backoff_ms > PROT_RETRY_MAX_MS)
			j->backoff_ms = PROT_RETRY_MAX_MS;
		j->at_ms = rft_now_ms() +
			   (p->leaving ? PROT_LEAVE_RETRY_MS : j->backoff_ms);
		j->next = p->later;
		p->later = j;
	}
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	free(bounce);
	return NULL;
}

/* --- a node that lost its memory --------------------------------------- */

struct walk {
	struct protect *p;
	int node;		/* lost: files it should hold */
	struct inode **v;
	size_t n, cap;
};

/* Is @node one of the holders of @owner's copies? */
static bool holds_for(const struct protect *p, int node, int owner)
{
	int h[ERS_MAX_M];

	if (p->par)
		return node != owner; /* rows rotate over the whole group */
	if (p->r < 2 || owner < 0 || owner >= p->nodes ||
	    ers_replica_holders(ERS_REPLICA_RING, p->nodes, p->r, owner, h) < 0)
		return false;
	for (int k = 0; k < p->r - 1; k++)
		if (h[k] == node)
			return true;
	return false;
}

/* The sealed files this node owns that @w asks for (eng_files_where). */
static bool wanted(void *ctx, const struct seal_view *v)
{
	struct walk *w = ctx;
	bool want;

	want = v->owner == w->p->self && v->gseal &&
	       (w->node < 0 || holds_for(w->p, w->node, w->p->self));
	/*
	 * xor, rs: every node may hold rows of this node's stripes; LOST
	 * left unprotected the files whose rows @node held.
	 */
	if (want && w->node >= 0 && w->p->par)
		want = v->unchanged && !v->protected;
	/*
	 * Rebuild: what is not here, and what is here but no longer
	 * protected (LOST took this node from its holders: an empty file
	 * has no piece to bring back, and its PROTECT to redo).
	 */
	if (want && w->node < 0)
		want = !v->protected || v->any_at_holders;
	return want;
}

/* Collect (held) the sealed files this node owns that @w asks for. */
static void walk_owned(struct protect *p, struct walk *w)
{
	long n = eng_files_where(p->e, wanted, w, &w->v);

	w->n = n > 0 ? (size_t)n : 0;
	if (n < 0)
		rft_err("protect: no memory to list this node's files");
}

void protect_node_lost(struct protect *p, int node, bool stopped)
{
	struct walk w = { p, node, NULL, 0, 0 };

	if (!p || node == p->self || !holds_for(p, node, p->self))
		return;
	if (p->par) {
		parity_node_lost(p->par, node);
		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		p->orphans = true;
		p->clean_at_ms = 0;
		pthread_cond_broadcast(&p->cv);
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	}
	/* Stopped: its copies go to it when it starts again (its LOST). */
	if (stopped)
		return;
	walk_owned(p, &w);
	for (size_t i = 0; i < w.n; i++) {
		struct seal_view v;

		if (file_seal_view(p->e, w.v[i], &v) == 0)
			protect_file(p, w.v[i], v.gseal);
		ns_unhold(p->e, w.v[i]);
	}
	if (w.n)
		rft_info("node %d lost its memory: sending it the copies of %zu "
			 "files again",
			 node, w.n);
	free(w.v);
}

/*
 * Bring back what of @in (owned here, held) is not in memory, from its
 * holders, then protect it again.  @b: the calling thread's pacer (the
 * rebuild's), NULL for none (verify --repair: a few pieces, on the
 * caller's thread).  0; -ESTALE when the file is gone or no longer this
 * node's (nothing left to bring back); -ENODATA when it is lost (no
 * copy, parity or persisted copy of its seal: nowhere to bring it back
 * from); -errno to try again.
 */
static int rebuild_file(struct protect *p, struct inode *in, struct pacer *b)
{
	struct seal_view v;
	int rc;

	if (file_seal_view(p->e, in, &v) < 0 || !v.linked ||
	    v.owner != p->self)
		return -ESTALE;
	if (v.lost)
		return -ENODATA;
	rc = 0;
	/* What is in this node's spill dir is here: not fetched. */
	if (v.npieces && !v.all_here)
		rc = !b || pace(p, b, v.bytes_away)
			     ? file_load_missing(p->e, in, 0, v.npieces - 1,
						 NULL)
			     : -ECANCELED;
	if (rc < 0)
		return rc;
	/* The owner's own data now: kept, not a cache. */
	file_keep_fetched(p->e, in);
	protect_file(p, in, v.gseal);
	if (b)
		atomic_fetch_add(&p->rebuild_bytes, v.bytes_away);
	return 0;
}

int protect_repair(struct protect *p, struct inode *in)
{
	return p ? rebuild_file(p, in, NULL) : -EOPNOTSUPP;
}

/*
 * The rebuild, on a daemon that started with empty memory: bring back
 * every file this node owns from the holders of its copies, then protect
 * it again (its holders have their copies still: only DONE goes).  The
 * copies this node held for others come back from their owners
 * (protect_node_lost on their side).  A file that cannot be brought back
 * now (its holders not reachable yet, memory full) is tried again, with a
 * backoff from 1 s to 30 s, until it is back, gone, or the daemon stops;
 * a lost one (file_lost: the log says no copy of it is left) is not
 * tried: it is counted and named (protect --wait, rebuild --wait).
 */
static void *rebuild_main(void *arg)
{
	struct protect *p = arg;
	struct walk w = { p, -1, NULL, 0, 0 };
	unsigned backoff = PROT_RETRY_MIN_MS;
	uint64_t files_done = 0;
	size_t left;
	bool stop;

	walk_owned(p, &w);
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	p->rebuild_files = w.n;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	rft_info("rebuild: %zu files of this node to bring back", w.n);
	for (left = w.n;;) {
		size_t keep = 0;

		for (size_t i = 0; i < left; i++) {
			struct inode *in = w.v[i];
			int rc;

			leaf_lock(&p->lock, ENG_RANK_PROTECT);
			/* A graceful stop: the rest is on its holders. */
			stop = p->stop || p->leaving;
			leaf_unlock(&p->lock, ENG_RANK_PROTECT);
			rc = stop ? -ECANCELED : rebuild_file(p, in, &p->rebuild_pace);
			if (rc == -ENODATA) {
				atomic_fetch_add(&p->rebuild_lost, 1);
				ns_unhold(p->e, in);
				continue;
			}
			if (rc < 0 && rc != -ESTALE) {
				/* Kept for the next round. */
				if (!stop && backoff == PROT_RETRY_MIN_MS)
					rft_warn("rebuild: inode %llu: %s; "
						 "trying again",
						 (unsigned long long)
							 eng_inode_ino(in),
						 strerror(-rc));
				w.v[keep++] = in;
				continue;
			}
			ns_unhold(p->e, in);
			files_done++;
		}
		left = keep;
		atomic_store(&p->rebuild_failed, left);
		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		p->rebuild_done = files_done;
		for (uint64_t until = rft_now_ms() + backoff;
		     left && !p->stop && !p->leaving && rft_now_ms() < until;)
			rft_cond_wait_until(&p->cv, &p->lock, until);
		stop = p->stop || p->leaving;
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
		if (!left || stop)
			break;
		atomic_fetch_add(&p->retries, 1);
		backoff = backoff * 2 > PROT_RETRY_MAX_MS ? PROT_RETRY_MAX_MS
							  : backoff * 2;
	}
	for (size_t i = 0; i < left; i++)
		ns_unhold(p->e, w.v[i]);
	free(w.v);
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	p->rebuild_running = false;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	memb_set_rebuilding(p->memb, false);
	if (left)
		rft_warn("rebuild: stopped with %zu of %zu files not back",
			 left, w.n);
	else if (atomic_load(&p->rebuild_lost))
		rft_err("rebuild: done (%llu files back); %llu files are "
			"lost: no copy, parity or persisted copy of them is "
			"left (named by reftfs-admin rebuild)",
			(unsigned long long)files_done,
			(unsigned long long)atomic_load(&p->rebuild_lost));
	else
		rft_info("rebuild: done (%llu files)",
			 (unsigned long long)files_done);
	return NULL;
}

int protect_rebuild(struct protect *p)
{
	int rc;

	if (!p || p->rebuilding)
		return 0;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	p->rebuild_running = true;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	/* The others show this node "rebuilding" until it is done. */
	memb_set_rebuilding(p->memb, true);
	rc = -pthread_create(&p->rebuilder, NULL, rebuild_main, p);
	if (rc == 0) {
		p->rebuilding = true;
	} else {
		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		p->rebuild_running = false;
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
		memb_set_rebuilding(p->memb, false);
	}
	return rc;
}

/* --- a graceful stop --------------------------------------------------- */

/*
 * A sealed file of this node not protected yet, whose bytes are all here
 * (so that its protection can go on), neither lost nor persisted.
 */
static bool pending(void *ctx, const struct seal_view *v)
{
	const struct protect *p = ctx;

	return v->owner == p->self && v->sealed && !v->protected &&
	       !v->lost && !v->persisted && v->all_here;
}

/*
 * A holder this node's protections need that is declared dead, or -1.
 * One not heard from yet (a daemon that just started) or suspect may
 * still answer: the wait goes on for it.
 */
static int holder_down(struct protect *p)
{
	struct memb_view v;

	memb_get_view(p->memb, &v);
	for (int k = 0; k < p->nholders; k++)
		if (v.node[p->holders[k]].state == MEMB_DEAD)
			return p->holders[k];
	return -1;
}

int protect_leave(struct protect *p, uint64_t until_ms)
{
	bool said = false;
	long n;
	int down;

	if (!p || !p->nholders)
		return 0;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	p->leaving = true;
	/* Retries due now, not after their backoff. */
	for (struct prot_job *j = p->later; j; j = j->next)
		j->at_ms = 0;
	pthread_cond_broadcast(&p->cv);
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	for (;;) {
		n = eng_files_where(p->e, pending, p, NULL);
		if (n == 0) {
			if (said)
				rft_info("stop: every sealed file of this "
					 "node is protected");
			return 0;
		}
		down = holder_down(p);
		if (down >= 0) {
			rft_warn("stop: %llu sealed files of this node not "
				 "protected, and node %d, a holder of their "
				 "%s, is dead: not waiting for it",
				 (unsigned long long)n, down,
				 p->par ? "parity rows" : "copies");
			return -EHOSTDOWN;
		}
		if (rft_now_ms() >= until_ms)
			return -ETIMEDOUT;
		if (!said)
			rft_info("stop: protecting %llu sealed files of this "
				 "node first (--stop-wait %llu s at most)",
				 (unsigned long long)n,
				 (unsigned long long)(until_ms - rft_now_ms() +
						      999) / 1000);
		said = true;
		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		rft_cond_wait_until(&p->cv, &p->lock,
				    rft_now_ms() + PROT_LEAVE_POLL_MS < until_ms
					? rft_now_ms() + PROT_LEAVE_POLL_MS
					: until_ms);
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	}
}

/* --- the module --------------------------------------------------------- */

void protect_file(struct protect *p, struct inode *in, uint64_t gseal)
{
	struct prot_job *j;

	if (!p || p->nholders == 0)
		return;
	j = calloc(1, sizeof(*j));
	if (!j) {
		rft_warn("inode %llu: no memory to protect it",
			 (unsigned long long)eng_inode_ino(in));
		return;
	}
	eng_hold(p->e, in);
	j->in = in;
	j->gseal = gseal;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	p->queued++;
	pthread_cond_broadcast(&p->cv);
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
}

/*
 * xor, rs: a file owned here that lost its last name (an unlink, a rename
 * over it) has its pieces taken out of the rows (under the names lock
 * only: a job is queued); so has one whose pieces were evicted (under
 * ns->lock: the sender queues the job).
 */
static void on_event(struct eng *e, const struct eng_ev *ev, void *ctx)
{
	struct protect *p = ctx;
	struct inode *in = ev->kind == EV_UNLINKED && ev->last ? ev->in
			   : ev->kind == EV_RENAMED		 ? ev->dst
								 : NULL;

	(void)e;
	if (ev->kind == EV_EVICTED) {
		/* Under ns->lock: p->lock only; the sender queues the job. */
		struct folded *fo;

		leaf_lock(&p->lock, ENG_RANK_PROTECT);
		fo = p->folded[folded_bucket(eng_inode_ino(ev->in))];
		while (fo && fo->in != ev->in)
			fo = fo->next;
		if (fo && !fo->evicted) {
			fo->evicted = true;
			fo->enext = p->evicted;
			p->evicted = fo;
			pthread_cond_broadcast(&p->cv);
		}
		leaf_unlock(&p->lock, ENG_RANK_PROTECT);
		return;
	}
	if (in && eng_inode_is_file(in) && folded_find(p, in))
		protect_file(p, in, 0);
}

void protect_changed(struct protect *p, uint64_t ino)
{
	struct inode *in;

	if (!p || !p->par)
		return;
	in = eng_find_hold(p->e, ino);
	if (!in)
		return;
	if (eng_inode_is_file(in) && folded_find(p, in))
		protect_file(p, in, 0);
	ns_unhold(p->e, in);
}

int protect_reconstruct(struct protect *p, const struct eng_piece *pc,
			uint8_t *buf, const struct timespec *deadline)
{
	if (!p || !p->par || !pc->scheme)
		return -EOPNOTSUPP;
	return parity_rebuild_piece(p->par, pc, buf, deadline, p->get,
				    p->get_ctx);
}

void protect_scrub(struct protect *p, const struct eng_piece *pc,
		   uint32_t npieces, struct eng_verify_info *vi)
{
	if (p && p->par)
		parity_scrub(p->par, pc, npieces, p->get, p->get_ctx, vi);
}

uint32_t protect_seal_code(const struct protect *p)
{
	return p ? parity_seal_code(p->par) : 0;
}

int protect_new(struct eng *e, struct grp *g, parity_get_fn *get,
		void *get_ctx, struct protect **out)
{
	const struct peer_rx rx = { .bulk_dest = rx_bulk_dest,
				    .deliver = rx_deliver };
	struct peer_rx r = rx;
	struct ers_scheme s;
	struct protect *p;
	int rc;

	*out = NULL;
	rc = grp_protect(g, &s);
	if (rc <= 0)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->e = e;
	p->get = get;
	p->get_ctx = get_ctx;
	p->x = grp_xport(g);
	p->memb = grp_memb(g);
	p->log = grp_log(g);
	p->self = grp_self(g);
	p->nodes = grp_nodes(g);
	p->r = s.kind == ERS_REPLICATE ? s.m + 1 : 1;
	p->bw = grp_protect_bw(g);
	if (s.kind != ERS_REPLICATE) {
		p->folded = calloc(PROT_FOLDED_BUCKETS, sizeof(*p->folded));
		rc = p->folded ? parity_new(e, p->x, p->memb, p->self,
					     p->nodes, &s, grp_codec(g),
					     &p->par)
			       : -ENOMEM;
		if (rc == 0)
			rc = eng_listen(e, on_event, p);
		if (rc < 0) {
			parity_free(p->par);
			free(p->folded);
			free(p);
			return rc;
		}
		ers_scheme_fit(&s, p->nodes); /* checked by parity_new */
		ers_scheme_format(&s, p->scheme, sizeof(p->scheme));
		/* Every other node may hold rows: all are "holders". */
		for (int n = 0; n < p->nodes; n++)
			if (n != p->self)
				p->holders[p->nholders++] = n;
	} else if (p->r > 1) {
		rc = ers_replica_holders(ERS_REPLICA_RING, p->nodes, p->r,
					 p->self, p->holders);
		if (rc < 0) {
			free(p);
			return rc;
		}
		p->nholders = p->r - 1;
	}
	pthread_mutex_init(&p->lock, NULL);
	rft_cond_init(&p->cv);
	r.ctx = p;
	rc = rft_wq_new("rft-prot-ans", 1, &p->answers);
	if (rc == 0)
		rc = peer_register(p->x, PEER_T_DATA_FIRST, PEER_T_DATA_LAST,
				   &r);
	if (rc < 0) {
		protect_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int protect_start(struct protect *p)
{
	int rc;

	if (!p)
		return 0;
	rc = -pthread_create(&p->sender, NULL, sender_main, p);
	if (rc == 0) {
		rc = rft_wq_start(p->answers);
		if (rc < 0) {
			leaf_lock(&p->lock, ENG_RANK_PROTECT);
			p->stop = true;
			pthread_cond_broadcast(&p->cv);
			leaf_unlock(&p->lock, ENG_RANK_PROTECT);
			pthread_join(p->sender, NULL);
		}
	}
	if (rc < 0) {
		rft_err("cannot start protection: %s", strerror(-rc));
		return rc;
	}
	p->started = true;
	return 0;
}

void protect_stop(struct protect *p)
{
	if (!p || !p->started)
		return;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	/* Answers not yet sent are dropped: their askers time out. */
	rft_wq_stop(p->answers, RFT_WQ_CANCEL);
	pthread_join(p->sender, NULL);
	if (p->rebuilding)
		pthread_join(p->rebuilder, NULL);
	p->rebuilding = false;
	p->started = false;
}

void protect_free(struct protect *p)
{
	struct prot_job *lists[2];

	if (!p)
		return;
	lists[0] = p->head;
	lists[1] = p->later;
	for (int i = 0; i < 2; i++)
		while (lists[i]) {
			struct prot_job *j = lists[i];

			lists[i] = j->next;
			job_free(p, j);
		}
	rft_wq_free(p->answers);
	for (size_t b = 0; p->folded && b < PROT_FOLDED_BUCKETS; b++)
		while (p->folded[b]) {
			struct folded *fo = p->folded[b];

			p->folded[b] = fo->next;
			folded_free(p, fo, false);
		}
	free(p->folded);
	parity_free(p->par);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cv);
	free(p);
}

void protect_get_stats(struct protect *p, struct eng_protect_stats *s)
{
	struct memb_view v;
	bool orphans;

	if (!p)
		return;
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	orphans = p->orphans;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	if (orphans) {
		struct par_orphan *o;

		if (list_orphans(p, &o, &s->parity_stale) > 0)
			free(o);
	}
	s->copies = p->par ? 0 : (unsigned)p->r;
	if (p->par)
		snprintf(s->scheme, sizeof(s->scheme), "%s", p->scheme);
	else
		snprintf(s->scheme, sizeof(s->scheme), "replicate:%d", p->r);
	parity_get_stats(p->par, s);
	s->bw = p->bw;
	s->files_protected = atomic_load(&p->files_protected);
	s->pieces_sent = atomic_load(&p->pieces_sent);
	s->bytes_sent = atomic_load(&p->bytes_sent);
	s->pieces_held = atomic_load(&p->pieces_held);
	s->bytes_held = atomic_load(&p->bytes_held);
	s->pieces_refused = atomic_load(&p->pieces_refused);
	s->retries = atomic_load(&p->retries);
	leaf_lock(&p->lock, ENG_RANK_PROTECT);
	s->files_pending = p->queued;
	for (struct prot_job *j = p->later; j; j = j->next)
		if (j->stall_err && !s->files_stalled++) {
			s->stalled_holder = j->stall_holder;
			s->stalled_err = j->stall_err;
		}
	s->rebuilding = p->rebuild_running;
	s->rebuild_files = p->rebuild_files;
	s->rebuild_done = p->rebuild_done;
	leaf_unlock(&p->lock, ENG_RANK_PROTECT);
	s->rebuild_bytes = atomic_load(&p->rebuild_bytes);
	s->rebuild_failed = atomic_load(&p->rebuild_failed);
	s->rebuild_lost = atomic_load(&p->rebuild_lost);
	s->holder_dead = -1;
	memb_get_view(p->memb, &v);
	for (int k = 0; k < p->nholders; k++)
		if (v.node[p->holders[k]].state == MEMB_DEAD) {
			s->holder_dead = p->holders[k];
			break;
		}
}
