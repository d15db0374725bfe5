/*
 * test_stress.c - many threads on one engine at once, checked against a
 * model of what every file must hold.
 *
 * Workers each own a directory of NFILES names and make every data and
 * name call on them: writes (synchronous and queued for the copier),
 * truncates (setattr and O_TRUNC opens), reads, renames over existing
 * names, unlinks, closes.  Nobody else touches a worker's files, so the
 * worker keeps a sequential model (bytes and size) of each, updated after
 * each of its calls, and every read must match it byte for byte.  ENOSPC
 * is a legal answer; a short write changes the model by what it wrote.
 *
 * Chaos threads share one file: queued and synchronous writes of words
 * that name their write and their offset, truncates to 0 and other sizes,
 * reads.  Which bytes win there is up to the scheduler, so reads are
 * checked for what must hold whatever the order: each 8-byte word is zero
 * or a word some write put at that offset, and never one that a truncate
 * begun after that write returned, and ended before the read began, cut
 * off.  Now and then the chaos threads are held and the file is grown:
 * past its old end there must be zeros only.
 *
 * A flusher asks for write-backs and follows their progress.  The memory
 * budget is small and there is a persist dir, so eviction, read-through
 * and ENOSPC all happen.  Two probes look for threads that sleep holding a
 * lock: one in the store's pressure hook (a writer waiting for memory must
 * not hold its file's lock), one in the callback of queued writes (nobody
 * waits for the copier holding ns->lock).
 *
 * Then every file must read back as its model, and again after eng_stop()
 * and a new engine on the same persist dir.
 *
 * RFT_STRESS_SEED=N replays the calls of each thread of a run (not their
 * interleaving); RFT_STRESS_OPS sets the calls per worker.  A run must
 * fill memory to be worth anything, and checks that it did: a few hundred
 * calls per worker are the least that passes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>

#include <cmocka.h>

#include "eng_fixture.h"
#include "evict.h"
#include "watchdog.h"

#define NWORKERS 6
#define NFILES 3		/* names per worker */
#define FILE_MAX (2 * MiB + 64 * 1024)
#define STRESS_MEM (16 * MiB)
#define DEFAULT_OPS 700	/* calls per worker */
#define DEADLINE_S 40		/* a slow machine stops early, not late */
#define HIST 8			/* calls of a worker shown when it fails */
#define MAX_FAILURES 16	/* kept for the report; all are printed */

#define CHAOS_WRITERS 2
#define CHAOS_THREADS (CHAOS_WRITERS + 2) /* + truncator + reader */
#define CHAOS_MAX (2 * MiB + 256 * 1024)  /* multiple of 8 */
#define CHAOS_GROWN (CHAOS_MAX + MiB)
#define CHAOS_IDS (1u << 18)
#define CHAOS_CUTS (1u << 16)
#define QUIESCE_EVERY 8		/* reads between checks with all held */

#define PROBE_MS 1000		/* a lock held this long by a sleeper */
#define FLUSH_TIMEOUT_S 60

/*
 * The probes take the locks they look at, which orders threads in
 * ThreadSanitizer's eyes and could hide the races it is run to find:
 * there they are left out.
 */
#if defined(__SANITIZE_THREAD__)
#define PROBES 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PROBES 0
#endif
#endif
#ifndef PROBES
#define PROBES 1
#endif

/* --- the model of one worker's file ----------------------------------- */

struct mfile {
	bool present;
	uint64_t ino;
	struct eng_file *fp;	/* NULL: not open */
	uint64_t size;
	uint8_t *data;		/* FILE_MAX bytes; zeros from size on */
};

static void model_write(struct mfile *m, const uint8_t *buf, uint64_t off,
			uint64_t n)
{
	memcpy(m->data + off, buf, n);
	if (off + n > m->size)
		m->size = off + n;
}

static void model_truncate(struct mfile *m, uint64_t size)
{
	/* Cut bytes must read as zeros when the file grows again. */
	if (size < m->size)
		memset(m->data + size, 0, m->size - size);
	m->size = size;
}

/* How many bytes a read of @len at @off returns. */
static uint64_t model_read_len(const struct mfile *m, uint64_t off,
			       uint64_t len)
{
	if (off >= m->size)
		return 0;
	return m->size - off < len ? m->size - off : len;
}

static void model_drop(struct mfile *m)
{
	model_truncate(m, 0);
	*m = (struct mfile){ .data = m->data };
}

/* A rename of @from over @to. */
static void model_move(struct mfile *to, struct mfile *from)
{
	uint8_t *spare = to->data;

	memset(spare, 0, to->size);
	*to = *from;
	*from = (struct mfile){ .data = spare };
}

/* --- the chaos file's words -------------------------------------------- */

/* The word write @id puts at @off: it names both, so no byte can stray. */
static uint64_t chaos_word(uint32_t id, uint64_t off)
{
	return (uint64_t)id << 32 | ((uint32_t)(off >> 3) ^ (id * 2654435761u));
}

/* The write that put nonzero @word at @off, or 0 if none could have. */
static uint32_t chaos_word_id(uint64_t word, uint64_t off, uint32_t next_id)
{
	uint32_t id = (uint32_t)(word >> 32);

	if (id == 0 || id >= next_id)
		return 0;
	return chaos_word(id, off) == word ? id : 0;
}

static void chaos_fill(uint8_t *buf, uint32_t id, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i += 8) {
		uint64_t w = chaos_word(id, off + i);

		memcpy(buf + i, &w, 8);
	}
}

/* One truncate of the chaos file, on st->clock. */
struct chaos_cut {
	uint64_t size;
	uint64_t t_start, t_end;
};

/*
 * Which truncates a read must see: those ended before it began.  The one
 * truncator makes them in order, so they are a prefix of the log; min[j]
 * is the smallest size cut to by truncate j or a later one of the prefix.
 */
struct cut_view {
	const struct chaos_cut *cuts;
	uint32_t n;
	uint64_t *min; /* n + 1 entries */
};

static void cut_view_build(struct cut_view *v, const struct chaos_cut *cuts,
			   uint32_t published, uint64_t read_start,
			   uint64_t *min)
{
	uint32_t n = published;

	while (n > 0 && cuts[n - 1].t_end > read_start)
		n--;
	min[n] = UINT64_MAX;
	for (uint32_t j = n; j-- > 0;)
		min[j] = cuts[j].size < min[j + 1] ? cuts[j].size : min[j + 1];
	*v = (struct cut_view){ cuts, n, min };
}

/*
 * Smallest size a truncate cut the file to after a write that returned at
 * @done (so its copy had landed) and before the read: a byte of that
 * write at or past it must be gone.  UINT64_MAX if none.
 */
static uint64_t cut_after(const struct cut_view *v, uint64_t done)
{
	uint32_t lo = 0, hi = v->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (v->cuts[mid].t_start > done)
			hi = mid;
		else
			lo = mid + 1;
	}
	return v->min[lo];
}

/* --- shared state ------------------------------------------------------ */

/* Holds the chaos threads between their calls, for a check with all still. */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned active;
	bool closed;
};

static void gate_enter(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	while (g->closed)
		pthread_cond_wait(&g->cond, &g->lock);
	g->active++;
	pthread_mutex_unlock(&g->lock);
}

static void gate_leave(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	if (--g->active == 0)
		pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

static void gate_close(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->closed = true;
	while (g->active)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->closed = false;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

struct worker {
	struct stress *st;
	int id;
	uint64_t rng;
	uint64_t dir;
	struct mfile f[NFILES];
	uint8_t *wbuf, *rbuf;	/* FILE_MAX each */
	unsigned long ops;
	bool failed;		/* stops after its first failure */
	char hist[HIST][128];
	pthread_t thread;
};

struct chaos_thread {
	struct stress *st;
	int id;
	uint64_t rng;
	struct eng_file *fp;
	uint8_t *buf, *buf2;	/* the reader's, CHAOS_GROWN each */
	uint64_t *min;		/* the reader's, CHAOS_CUTS + 1 */
	const char *_Atomic doing; /* for the watchdog's report */
	pthread_t thread;
};

struct chaos {
	uint64_t dir, ino;
	_Atomic uint32_t next_id;	/* write ids from 1 */
	_Atomic uint64_t *wdone;	/* by id: clock when the write returned */
	struct chaos_cut *cuts;		/* appended by the truncator only */
	_Atomic uint32_t ncuts;		/* entries published */
	struct gate gate;
	struct chaos_thread t[CHAOS_THREADS];
	uint8_t *final;			/* contents at the end, CHAOS_GROWN */
	uint64_t final_size;
};

struct counters {
	_Atomic uint64_t calls, enospc_writes, short_writes, enospc_reads;
	_Atomic uint64_t queued, done, truncates, trunc_opens, renames_over;
	_Atomic uint64_t unlinks, flushes, fallocates, enospc_fallocates;
	_Atomic uint64_t chaos_writes, chaos_cuts, chaos_reads, chaos_stills;
	_Atomic uint64_t probes_run;
};

struct stress {
	struct fixture fx;
	uint64_t seed;
	unsigned long ops;
	struct timespec deadline;
	_Atomic bool stop;
	_Atomic bool timed_out;
	_Atomic uint64_t clock;	/* orders chaos calls; from 1 */
	pthread_mutex_t fail_lock;
	char failures[MAX_FAILURES][2048]; /* the first ones; fail_lock */
	unsigned nfailures;	/* fail_lock */
	_Atomic bool lock_sleep_seen[2]; /* reported once per probe */
	bool all_closed;	/* and written back: all may be evicted */
	struct worker w[NWORKERS];
	struct chaos ch;
	struct counters cnt;
	struct watchdog wd;	/* armed for each test */
	pthread_t flusher;
	const char *_Atomic flusher_doing; /* for the watchdog's report */
};

static void failf(struct stress *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Record a failure.  The thread that found it stops; the others go on, so
 * that one run shows every kind of failure it can reach.
 */
static void failf(struct stress *st, const char *fmt, ...)
{
	char msg[sizeof(st->failures[0])];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "stress: FAILED (seed %llu): %s\n",
		(unsigned long long)st->seed, msg);
	pthread_mutex_lock(&st->fail_lock);
	if (st->nfailures < MAX_FAILURES)
		snprintf(st->failures[st->nfailures],
			 sizeof(st->failures[0]), "%s", msg);
	st->nfailures++;
	pthread_mutex_unlock(&st->fail_lock);
}

static unsigned nfailed(struct stress *st)
{
	unsigned n;

	pthread_mutex_lock(&st->fail_lock);
	n = st->nfailures;
	pthread_mutex_unlock(&st->fail_lock);
	return n;
}

/*
 * From the test's thread: fail if anything failed since @from.  Each
 * failure was printed whole when found; cmocka's message is short.
 */
static void fail_since(struct stress *st, unsigned from)
{
	unsigned n = nfailed(st);

	if (n == from)
		return;
	fail_msg("%u failure(s), printed above (\"stress: FAILED\"); replay "
		 "with RFT_STRESS_SEED=%llu RFT_STRESS_OPS=%lu; the first: "
		 "%.300s", n - from, (unsigned long long)st->seed, st->ops,
		 from < MAX_FAILURES ? st->failures[from] : "");
}

static bool stopping(struct stress *st)
{
	struct timespec now;

	if (atomic_load(&st->stop))
		return true;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec < st->deadline.tv_sec)
		return false;
	if (!atomic_exchange(&st->timed_out, true))
		fprintf(stderr, "stress: %d s deadline: stopping early\n",
			DEADLINE_S);
	atomic_store(&st->stop, true);
	return true;
}

static uint64_t tick(struct stress *st)
{
	return atomic_fetch_add(&st->clock, 1);
}

/* --- randomness -------------------------------------------------------- */

static uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

static uint64_t rnd_below(uint64_t *s, uint64_t n)
{
	return n ? rnd(s) % n : 0;
}

static void rnd_fill(uint64_t *s, uint8_t *p, uint64_t len)
{
	uint64_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t x = rnd(s);

		memcpy(p + i, &x, 8);
	}
	for (; i < len; i++)
		p[i] = (uint8_t)rnd(s);
}

/* --- lock probes --------------------------------------------------------- */

/* The file the calling thread is in a data call on, for the probe. */
static _Thread_local struct file *probe_file;

/* Is @l held for writing, by anyone, for all of @ms? */
static bool held_for(pthread_rwlock_t *l, unsigned ms)
{
	for (unsigned i = 0; i < ms; i++) {
		if (pthread_rwlock_tryrdlock(l) == 0) {
			pthread_rwlock_unlock(l);
			return false;
		}
		usleep(1000);
	}
	return true;
}

/*
 * The store calls this when an allocation found memory full, just before
 * the allocating thread waits for a chunk: that thread must not hold its
 * file's lock, or readers, the evictor and write-back wait with it.
 */
static void pressure_probe(void *ctx)
{
	struct stress *st = ctx;
	struct file *f = probe_file;

	if (PROBES && f && !atomic_load(&st->lock_sleep_seen[0])) {
		atomic_fetch_add(&st->cnt.probes_run, 1);
		if (held_for(&f->lock, PROBE_MS) &&
		    !atomic_exchange(&st->lock_sleep_seen[0], true))
			failf(st, "a thread about to wait for memory holds "
				  "its file's lock (held %u ms): it sleeps "
				  "under the lock", PROBE_MS);
	}
	evict_pressure(st->fx.e);
}

/* A buffer handed to eng_write_async, freed when its copy is done. */
struct abuf {
	struct stress *st;
	uint8_t data[];
};

static void async_done(void *ctx)
{
	struct abuf *b = ctx;
	struct stress *st = b->st;

	/*
	 * Copies are waited for by truncates, O_TRUNC opens, syncs and
	 * closes: none of them may wait holding ns->lock, on which every
	 * lookup and create queues up meanwhile.
	 */
	if (PROBES && !atomic_load(&st->lock_sleep_seen[1])) {
		atomic_fetch_add(&st->cnt.probes_run, 1);
		if (held_for(&st->fx.e->ns.lock, PROBE_MS) &&
		    !atomic_exchange(&st->lock_sleep_seen[1], true))
			failf(st, "ns->lock held for %u ms while a queued "
				  "copy completes: someone waits for the "
				  "copier holding it", PROBE_MS);
	}
	atomic_fetch_add(&st->cnt.done, 1);
	free(b);
}

/* --- workers ------------------------------------------------------------ */

enum op {
	OP_WRITE,
	OP_WRITE_ASYNC,
	OP_TRUNCATE,
	OP_TRUNC_OPEN,
	OP_READ,
	OP_RENAME,
	OP_UNLINK,
	OP_CLOSE,
	OP_FSYNC,
	OP_FALLOCATE,
	NR_OPS
};

/* How often each call is made; each worker makes one of them common. */
static const unsigned op_weight[NR_OPS] = { 20, 20, 6, 4, 20, 4, 3, 8, 2, 4 };
static const enum op role_op[] = { OP_WRITE, OP_WRITE_ASYNC, OP_TRUNCATE,
				   OP_READ, OP_RENAME, OP_UNLINK };
#define ROLE_WEIGHT 40

static void fname(int i, char name[8])
{
	snprintf(name, 8, "f%d", i);
}

static void note(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note(struct worker *w, const char *fmt, ...)
{
	char *h = w->hist[w->ops % HIST];
	va_list ap;
	int n = snprintf(h, sizeof(w->hist[0]), "#%lu ", w->ops);

	va_start(ap, fmt);
	vsnprintf(h + n, sizeof(w->hist[0]) - (size_t)n, fmt, ap);
	va_end(ap);
}

static void wfail(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Record a failure with the worker's last calls, oldest first. */
static void wfail(struct worker *w, const char *fmt, ...)
{
	char msg[sizeof(w->st->failures[0])];
	size_t n;
	va_list ap;

	n = (size_t)snprintf(msg, sizeof(msg), "worker %d: ", w->id);
	va_start(ap, fmt);
	n += (size_t)vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
	va_end(ap);
	for (unsigned long i = w->ops + 1 > HIST ? w->ops + 1 - HIST : 0;
	     i <= w->ops && n < sizeof(msg); i++)
		if (w->hist[i % HIST][0])
			n += (size_t)snprintf(msg + n, sizeof(msg) - n,
					      "\n  %s", w->hist[i % HIST]);
	w->failed = true;
	failf(w->st, "%s", msg);
}

static struct eng *weng(struct worker *w)
{
	return w->st->fx.e;
}

/* Open name @i as the kernel would, by lookup; checks what lookup shows. */
static int open_name(struct worker *w, int i, int flags,
		     struct eng_file **fp)
{
	struct eng *e = weng(w);
	struct mfile *m = &w->f[i];
	char name[8];
	struct stat st;
	int rc;

	fname(i, name);
	rc = eng_lookup(e, w->dir, name, &st);
	if (rc < 0) {
		wfail(w, "lookup f%d: %s", i, strerror(-rc));
		return rc;
	}
	if (st.st_ino != m->ino || (uint64_t)st.st_size != m->size) {
		wfail(w, "lookup f%d: inode %llu size %lld, model %llu %llu",
		      i, (unsigned long long)st.st_ino,
		      (long long)st.st_size, (unsigned long long)m->ino,
		      (unsigned long long)m->size);
		rc = -EIO;
	} else {
		rc = eng_open(e, st.st_ino, flags, fp, NULL);
		if (rc < 0)
			wfail(w, "open f%d: %s", i, strerror(-rc));
	}
	eng_forget(e, st.st_ino, 1); /* the kernel's forget of the lookup */
	return rc;
}

/* Make name @i exist and be open for writing. */
static int get_writable(struct worker *w, int i)
{
	struct eng *e = weng(w);
	struct mfile *m = &w->f[i];
	char name[8];
	struct stat st;
	int rc;

	if (m->present)
		return m->fp ? 0 : open_name(w, i, O_RDWR, &m->fp);
	fname(i, name);
	note(w, "create f%d", i);
	rc = eng_create(e, w->dir, name, 0644, getuid(), getgid(),
			O_CREAT | O_EXCL | O_RDWR, &st, &m->fp, NULL);
	if (rc < 0) {
		wfail(w, "create f%d: %s", i, strerror(-rc));
		return rc;
	}
	eng_forget(e, st.st_ino, 1);
	m->present = true;
	m->ino = st.st_ino;
	m->size = 0;
	return 0;
}

/*
 * Read @len bytes at @off of name @i through @fp and compare with the
 * model.  ENOSPC (no memory to bring evicted pieces back) is allowed
 * while files are open, which keeps them in memory.
 */
static bool check_read(struct worker *w, int i, struct eng_file *fp,
		       uint64_t off, uint64_t len, const char *what)
{
	struct mfile *m = &w->f[i];
	uint64_t want = model_read_len(m, off, len);
	ssize_t n;

	probe_file = &fp->inode->file;
	n = fx_read(weng(w), fp, w->rbuf, len, (off_t)off);
	probe_file = NULL;
	if (n == -ENOSPC && !w->st->all_closed) {
		atomic_fetch_add(&w->st->cnt.enospc_reads, 1);
		return true;
	}
	if (n < 0 || (uint64_t)n != want) {
		wfail(w, "read f%d [%llu,+%llu)%s: %zd bytes (%s), model "
			 "size %llu says %llu", i, (unsigned long long)off,
		      (unsigned long long)len, what, n,
		      n < 0 ? strerror((int)-n) : "",
		      (unsigned long long)m->size, (unsigned long long)want);
		return false;
	}
	for (uint64_t j = 0; j < want; j++) {
		if (w->rbuf[j] == m->data[off + j])
			continue;
		wfail(w, "read f%d [%llu,+%llu)%s differs from the model "
			 "at byte %llu (size %llu): 0x%02x, model 0x%02x", i,
		      (unsigned long long)off, (unsigned long long)len, what,
		      (unsigned long long)(off + j),
		      (unsigned long long)m->size, w->rbuf[j],
		      m->data[off + j]);
		return false;
	}
	return true;
}

/* An extent to write: small, large, across chunk edges, at the end. */
static void pick_extent(struct worker *w, uint64_t size, uint64_t *off,
			uint64_t *len)
{
	uint64_t r = rnd_below(&w->rng, 8);

	if (r < 4)
		*len = 1 + rnd_below(&w->rng, 16 * 1024);
	else if (r < 7)
		*len = 1 + rnd_below(&w->rng, 256 * 1024);
	else
		*len = 1 + rnd_below(&w->rng, MiB + MiB / 2);
	switch (rnd_below(&w->rng, 4)) {
	case 0: /* append */
		*off = size < FILE_MAX ? size : 0;
		break;
	case 1: /* around a chunk edge */
		*off = (1 + rnd_below(&w->rng, FILE_MAX / MiB)) * MiB;
		*off -= rnd_below(&w->rng, 64);
		break;
	default:
		*off = rnd_below(&w->rng, FILE_MAX);
	}
	if (*len > FILE_MAX - *off)
		*len = FILE_MAX - *off;
}

/* A size to truncate to: 0, shrink, grow, around a chunk edge. */
static uint64_t pick_size(struct worker *w, uint64_t size)
{
	uint64_t s;

	switch (rnd_below(&w->rng, 6)) {
	case 0:
		return 0;
	case 1:
	case 2:
		return rnd_below(&w->rng, size + 1);
	case 3:
		s = (1 + rnd_below(&w->rng, FILE_MAX / MiB)) * MiB;
		s = s + rnd_below(&w->rng, 33) - 16;
		break;
	case 4:
		s = size + rnd_below(&w->rng, 64 * 1024);
		break;
	default:
		s = rnd_below(&w->rng, FILE_MAX + 1);
	}
	return s > FILE_MAX ? FILE_MAX : s;
}

/* What a write returned is allowed; false (recorded) if not. */
static bool write_ok(struct worker *w, int i, ssize_t n, uint64_t len)
{
	if (n == -ENOSPC) {
		atomic_fetch_add(&w->st->cnt.enospc_writes, 1);
		return true;
	}
	if (n <= 0 || (uint64_t)n > len) {
		wfail(w, "write f%d of %llu bytes returned %zd (%s)", i,
		      (unsigned long long)len, n,
		      n < 0 ? strerror((int)-n) : "");
		return false;
	}
	if ((uint64_t)n < len)
		atomic_fetch_add(&w->st->cnt.short_writes, 1);
	return true;
}

static void op_write(struct worker *w, bool async)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];
	struct eng *e = weng(w);
	bool queued = false;
	uint64_t off, len;
	ssize_t n;

	if (get_writable(w, i) < 0)
		return;
	pick_extent(w, m->size, &off, &len);
	rnd_fill(&w->rng, w->wbuf, len);
	note(w, "%s f%d [%llu,+%llu) size %llu", async ? "write_async" : "write",
	     i, (unsigned long long)off, (unsigned long long)len,
	     (unsigned long long)m->size);
	probe_file = &m->fp->inode->file;
	if (async) {
		struct abuf *b = malloc(sizeof(*b) + len);

		if (!b) {
			probe_file = NULL;
			wfail(w, "out of memory");
			return;
		}
		b->st = w->st;
		memcpy(b->data, w->wbuf, len);
		n = eng_write_async(e, m->fp, b->data, len, (off_t)off,
				    async_done, b, &queued);
		if (queued)
			atomic_fetch_add(&w->st->cnt.queued, 1);
		else
			free(b);
	} else {
		n = eng_write(e, m->fp, w->wbuf, len, (off_t)off);
	}
	probe_file = NULL;
	if (write_ok(w, i, n, len) && n > 0)
		model_write(m, w->wbuf, off, (uint64_t)n);
}

/* Preallocate (with or without the size) or punch a hole. */
static void op_fallocate(struct worker *w)
{
	static const unsigned flags[] = {
		0, ENG_FALLOC_KEEP_SIZE,
		ENG_FALLOC_PUNCH_HOLE | ENG_FALLOC_KEEP_SIZE,
	};
	static const char *const what[] = { "allocate", "keep size", "punch" };
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];
	unsigned k = (unsigned)rnd_below(&w->rng, 3);
	uint64_t off, len, end;
	int rc;

	if (get_writable(w, i) < 0)
		return;
	pick_extent(w, m->size, &off, &len);
	note(w, "fallocate %s f%d [%llu,+%llu) size %llu", what[k], i,
	     (unsigned long long)off, (unsigned long long)len,
	     (unsigned long long)m->size);
	probe_file = &m->fp->inode->file;
	rc = eng_fallocate(weng(w), m->fp, flags[k], (off_t)off, (off_t)len);
	probe_file = NULL;
	if (rc == -ENOSPC) {
		/* All or nothing: the file is as it was. */
		atomic_fetch_add(&w->st->cnt.enospc_fallocates, 1);
		return;
	}
	if (rc < 0) {
		wfail(w, "fallocate %s f%d [%llu,+%llu): %s", what[k], i,
		      (unsigned long long)off, (unsigned long long)len,
		      strerror(-rc));
		return;
	}
	end = off + len;
	if (k == 0 && end > m->size)
		m->size = end; /* the model's bytes past its size are zeros */
	if (k == 2 && off < m->size)
		memset(m->data + off, 0, (end < m->size ? end : m->size) - off);
	atomic_fetch_add(&w->st->cnt.fallocates, 1);
}

static void op_truncate(struct worker *w)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];
	struct eng_setattr sa = { .valid = ENG_SET_SIZE };
	struct eng_file *fp;
	struct stat st;
	int rc;

	if (!m->present)
		return;
	sa.size = pick_size(w, m->size);
	/* By handle (ftruncate) or by inode (truncate) */
	fp = rnd_below(&w->rng, 2) ? m->fp : NULL;
	note(w, "truncate f%d %llu -> %llu%s", i, (unsigned long long)m->size,
	     (unsigned long long)sa.size, fp ? " by handle" : "");
	rc = eng_setattr(weng(w), m->ino, fp, &sa, &st);
	if (rc < 0 || (uint64_t)st.st_size != sa.size) {
		wfail(w, "truncate f%d to %llu: %s, size %lld", i,
		      (unsigned long long)sa.size, strerror(-rc),
		      rc < 0 ? -1LL : (long long)st.st_size);
		return;
	}
	model_truncate(m, sa.size);
	atomic_fetch_add(&w->st->cnt.truncates, 1);
}

static void op_trunc_open(struct worker *w)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];
	struct eng_file *fp;

	if (!m->present)
		return;
	note(w, "open f%d O_TRUNC, size %llu", i, (unsigned long long)m->size);
	if (open_name(w, i, O_RDWR | O_TRUNC, &fp) < 0)
		return;
	model_truncate(m, 0);
	if (m->fp)
		eng_release(weng(w), m->fp);
	m->fp = fp;
	atomic_fetch_add(&w->st->cnt.trunc_opens, 1);
}

static void op_read(struct worker *w)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];
	struct eng_file *fp = m->fp;
	uint64_t off = 0, len = FILE_MAX;
	struct stat st;
	int rc;

	if (!m->present)
		return;
	if (rnd_below(&w->rng, 4)) {
		off = rnd_below(&w->rng, m->size + 64 * 1024);
		len = 1 + rnd_below(&w->rng, MiB + 4096);
	}
	note(w, "read f%d [%llu,+%llu) size %llu%s", i,
	     (unsigned long long)off, (unsigned long long)len,
	     (unsigned long long)m->size, fp ? "" : " (opened to read)");
	rc = eng_getattr(weng(w), m->ino, &st);
	if (rc < 0 || (uint64_t)st.st_size != m->size) {
		wfail(w, "getattr f%d: %s, size %lld, model %llu", i,
		      strerror(-rc), rc < 0 ? -1LL : (long long)st.st_size,
		      (unsigned long long)m->size);
		return;
	}
	if (!fp && open_name(w, i, O_RDONLY, &fp) < 0)
		return;
	check_read(w, i, fp, off, len, "");
	if (fp != m->fp)
		eng_release(weng(w), fp);
}

/* Read name @i whole through its open handle, if any, and close that. */
static void drop_victim(struct worker *w, int i, const char *what)
{
	struct mfile *m = &w->f[i];

	if (!m->fp)
		return;
	check_read(w, i, m->fp, 0, FILE_MAX, what);
	eng_release(weng(w), m->fp);
	m->fp = NULL;
}

static void op_rename(struct worker *w)
{
	int a = (int)rnd_below(&w->rng, NFILES);
	int b = (a + 1 + (int)rnd_below(&w->rng, NFILES - 1)) % NFILES;
	char na[8], nb[8];
	int rc;

	if (!w->f[a].present)
		return;
	fname(a, na);
	fname(b, nb);
	note(w, "rename f%d (size %llu) over f%d%s", a,
	     (unsigned long long)w->f[a].size, b,
	     w->f[b].present ? "" : " (absent)");
	rc = eng_rename(weng(w), w->dir, na, w->dir, nb, 0);
	if (rc < 0) {
		wfail(w, "rename f%d f%d: %s", a, b, strerror(-rc));
		return;
	}
	if (w->f[b].present) {
		/* An unlinked file reads as before while it is open. */
		drop_victim(w, b, " through a handle open when renamed over");
		atomic_fetch_add(&w->st->cnt.renames_over, 1);
	}
	model_move(&w->f[b], &w->f[a]);
}

static void op_unlink(struct worker *w)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	char name[8];
	int rc;

	if (!w->f[i].present)
		return;
	fname(i, name);
	note(w, "unlink f%d%s", i, w->f[i].fp ? " (open)" : "");
	rc = eng_unlink(weng(w), w->dir, name);
	if (rc < 0) {
		wfail(w, "unlink f%d: %s", i, strerror(-rc));
		return;
	}
	drop_victim(w, i, " through a handle open when unlinked");
	model_drop(&w->f[i]);
	atomic_fetch_add(&w->st->cnt.unlinks, 1);
}

static void op_close(struct worker *w)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];

	if (!m->fp)
		return;
	note(w, "close f%d", i);
	eng_release(weng(w), m->fp); /* the last writer's close seals */
	m->fp = NULL;
}

static void op_fsync(struct worker *w)
{
	int i = (int)rnd_below(&w->rng, NFILES);
	struct mfile *m = &w->f[i];
	int rc;

	if (!m->fp)
		return;
	note(w, "fsync f%d", i);
	rc = eng_flush(weng(w), m->fp);
	if (rc == 0)
		rc = eng_fsync(weng(w), m->fp);
	if (rc < 0)
		wfail(w, "flush/fsync f%d: %s", i, strerror(-rc));
}

static enum op pick_op(struct worker *w)
{
	enum op role = role_op[w->id % (int)(sizeof(role_op) /
					     sizeof(role_op[0]))];
	unsigned total = ROLE_WEIGHT, r;

	for (int o = 0; o < NR_OPS; o++)
		total += op_weight[o];
	r = (unsigned)rnd_below(&w->rng, total);
	for (int o = 0; o < NR_OPS; o++) {
		unsigned wt = op_weight[o] + (o == (int)role ? ROLE_WEIGHT : 0);

		if (r < wt)
			return (enum op)o;
		r -= wt;
	}
	return role;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (; w->ops < w->st->ops && !w->failed && !stopping(w->st);
	     w->ops++) {
		w->hist[w->ops % HIST][0] = '\0';
		switch (pick_op(w)) {
		case OP_WRITE:
			op_write(w, false);
			break;
		case OP_WRITE_ASYNC:
			op_write(w, true);
			break;
		case OP_TRUNCATE:
			op_truncate(w);
			break;
		case OP_TRUNC_OPEN:
			op_trunc_open(w);
			break;
		case OP_READ:
			op_read(w);
			break;
		case OP_RENAME:
			op_rename(w);
			break;
		case OP_UNLINK:
			op_unlink(w);
			break;
		case OP_CLOSE:
			op_close(w);
			break;
		case OP_FALLOCATE:
			op_fallocate(w);
			break;
		case OP_FSYNC:
		case NR_OPS:
			op_fsync(w);
			break;
		}
		atomic_fetch_add(&w->st->cnt.calls, 1);
	}
	return NULL;
}

/* --- chaos ------------------------------------------------------------- */

static void *chaos_writer(void *arg)
{
	struct chaos_thread *t = arg;
	struct stress *st = t->st;
	struct chaos *ch = &st->ch;
	struct eng *e = st->fx.e;

	while (!stopping(st)) {
		uint64_t off = rnd_below(&t->rng, CHAOS_MAX / 8) * 8;
		uint64_t len = (1 + rnd_below(&t->rng, 32 * 1024)) * 8;
		bool async = rnd_below(&t->rng, 4) != 0, queued = false;
		struct abuf *b;
		uint32_t id;
		ssize_t n;

		if (rnd_below(&t->rng, 8) == 0)
			len = (1 + rnd_below(&t->rng, MiB / 8)) * 8;
		if (len > CHAOS_MAX - off)
			len = CHAOS_MAX - off;
		b = malloc(sizeof(*b) + len);
		if (!b) {
			failf(st, "chaos writer: out of memory");
			break;
		}
		b->st = st;
		atomic_store(&t->doing, "a write, at the gate");
		gate_enter(&ch->gate);
		id = atomic_fetch_add(&ch->next_id, 1);
		if (id >= CHAOS_IDS) {
			gate_leave(&ch->gate);
			free(b);
			break;
		}
		chaos_fill(b->data, id, off, len);
		atomic_store(&t->doing, async ? "eng_write_async" : "eng_write");
		probe_file = &t->fp->inode->file;
		if (async)
			n = eng_write_async(e, t->fp, b->data, len, (off_t)off,
					    async_done, b, &queued);
		else
			n = eng_write(e, t->fp, b->data, len, (off_t)off);
		probe_file = NULL;
		atomic_store(&ch->wdone[id], tick(st));
		gate_leave(&ch->gate);
		atomic_store(&t->doing, "between writes");
		if (queued)
			atomic_fetch_add(&st->cnt.queued, 1);
		else
			free(b);
		/* A short write ends at a chunk edge: whole words still. */
		if (n != -ENOSPC &&
		    (n <= 0 || (uint64_t)n > len || n % 8 != 0)) {
			failf(st, "chaos write %u [%llu,+%llu) returned %zd",
			      id, (unsigned long long)off,
			      (unsigned long long)len, n);
			break;
		}
		atomic_fetch_add(&st->cnt.chaos_writes, 1);
	}
	return NULL;
}

static int chaos_trunc_open(struct stress *st)
{
	struct eng *e = st->fx.e;
	struct eng_file *fp;
	struct stat sb;
	int rc = eng_lookup(e, st->ch.dir, "shared", &sb);

	if (rc < 0)
		return rc;
	rc = eng_open(e, sb.st_ino, O_RDWR | O_TRUNC, &fp, NULL);
	eng_forget(e, sb.st_ino, 1);
	if (rc == 0)
		eng_release(e, fp);
	return rc;
}

static void *chaos_truncator(void *arg)
{
	struct chaos_thread *t = arg;
	struct stress *st = t->st;
	struct chaos *ch = &st->ch;

	while (!stopping(st)) {
		struct eng_setattr sa = { .valid = ENG_SET_SIZE };
		uint64_t r = rnd_below(&t->rng, 8);
		uint32_t k = atomic_load(&ch->ncuts);
		struct chaos_cut cut;
		struct stat sb;
		int rc;

		sa.size = r < 2 ? 0 : rnd_below(&t->rng, CHAOS_MAX / 8 + 1) * 8;
		atomic_store(&t->doing, "a truncate, at the gate");
		gate_enter(&ch->gate);
		atomic_store(&t->doing, r == 0 ? "open(O_TRUNC)" : "setattr(size)");
		cut.t_start = tick(st);
		if (r == 0)
			rc = chaos_trunc_open(st);
		else
			rc = eng_setattr(st->fx.e, ch->ino,
					 r & 1 ? t->fp : NULL, &sa, &sb);
		cut.t_end = tick(st);
		gate_leave(&ch->gate);
		atomic_store(&t->doing, "between truncates");
		/* Only writes run beside it: they may have grown it since. */
		if (rc < 0 || (r != 0 && (uint64_t)sb.st_size < sa.size)) {
			failf(st, "chaos truncate to %llu: %s",
			      (unsigned long long)sa.size, strerror(-rc));
			break;
		}
		cut.size = sa.size;
		if (k < CHAOS_CUTS) {
			ch->cuts[k] = cut;
			atomic_store_explicit(&ch->ncuts, k + 1,
					      memory_order_release);
		}
		atomic_fetch_add(&st->cnt.chaos_cuts, 1);
		/* As often as writes, roughly: not a thousand to one. */
		usleep((useconds_t)rnd_below(&t->rng, 2000));
	}
	return NULL;
}

/*
 * Read the chaos file whole into @buf and check each word; returns the
 * length read, or -1 (failure recorded).
 */
static ssize_t chaos_read_check(struct chaos_thread *t, uint8_t *buf,
				const char *what)
{
	struct stress *st = t->st;
	struct chaos *ch = &st->ch;
	uint64_t start = tick(st);
	struct cut_view v;
	uint32_t next_id;
	ssize_t n;

	cut_view_build(&v, ch->cuts,
		       atomic_load_explicit(&ch->ncuts, memory_order_acquire),
		       start, t->min);
	probe_file = &t->fp->inode->file;
	n = fx_read(st->fx.e, t->fp, buf, CHAOS_MAX + 8, 0);
	probe_file = NULL;
	next_id = atomic_load(&ch->next_id);
	if (n < 0 || n > (ssize_t)CHAOS_MAX || n % 8 != 0) {
		failf(st, "%s of the chaos file: %zd bytes, at most %llu in "
			  "whole words expected", what, n,
		      (unsigned long long)CHAOS_MAX);
		return -1;
	}
	for (uint64_t o = 0; o < (uint64_t)n; o += 8) {
		uint64_t word, done, cut;
		uint32_t id;

		memcpy(&word, buf + o, 8);
		if (word == 0)
			continue;
		id = chaos_word_id(word, o, next_id);
		if (id == 0) {
			failf(st, "%s of the chaos file: the word at %llu, "
				  "%016llx, was written by no write there",
			      what, (unsigned long long)o,
			      (unsigned long long)word);
			return -1;
		}
		done = atomic_load(&ch->wdone[id]);
		cut = done ? cut_after(&v, done) : UINT64_MAX;
		if (o >= cut) {
			failf(st, "%s of the chaos file: the word at %llu is "
				  "from write %u, which returned at clock "
				  "%llu, before a truncate to %llu that "
				  "ended before the read began (clock %llu): "
				  "stale bytes", what, (unsigned long long)o,
			      id, (unsigned long long)done,
			      (unsigned long long)cut,
			      (unsigned long long)start);
			return -1;
		}
	}
	return n;
}

static int chaos_set_size(struct stress *st, struct eng_file *fp,
			  uint64_t size)
{
	struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = size };
	struct stat sb;
	int rc = eng_setattr(st->fx.e, 0, fp, &sa, &sb);

	if (rc < 0 || (uint64_t)sb.st_size != size)
		failf(st, "truncate of the chaos file to %llu: %s",
		      (unsigned long long)size, strerror(-rc));
	return rc;
}

/*
 * With no chaos call running: the size is what a read returns, growing
 * the file shows zeros past the old end (no bytes linger there), and
 * shrinking it back changes nothing.  Returns the size, or -1.
 */
static ssize_t chaos_still_check(struct chaos_thread *t)
{
	struct stress *st = t->st;
	struct stat sb;
	ssize_t n, n2;
	int rc;

	n = chaos_read_check(t, t->buf, "a read with the chaos threads held");
	if (n < 0)
		return -1;
	rc = eng_getattr(st->fx.e, st->ch.ino, &sb);
	if (rc < 0 || sb.st_size != n) {
		failf(st, "chaos file: getattr says %lld bytes, a read %zd",
		      rc < 0 ? -1LL : (long long)sb.st_size, n);
		return -1;
	}
	if (chaos_set_size(st, t->fp, CHAOS_GROWN) < 0)
		return -1;
	n2 = fx_read(st->fx.e, t->fp, t->buf2, CHAOS_GROWN, n);
	if (n2 != (ssize_t)CHAOS_GROWN - n) {
		failf(st, "chaos file grown to %llu: read at %zd gave %zd",
		      (unsigned long long)CHAOS_GROWN, n, n2);
		return -1;
	}
	for (ssize_t o = 0; o < n2; o += 8) {
		uint64_t word;

		memcpy(&word, t->buf2 + o, 8);
		if (word == 0)
			continue;
		failf(st, "chaos file grown from %zd to %llu bytes: the word "
			  "at %zd is %016llx (write %u), not zero: bytes "
			  "past the end lingered", n,
		      (unsigned long long)CHAOS_GROWN, n + o,
		      (unsigned long long)word,
		      chaos_word_id(word, (uint64_t)(n + o),
				    atomic_load(&st->ch.next_id)));
		return -1;
	}
	if (chaos_set_size(st, t->fp, (uint64_t)n) < 0)
		return -1;
	n2 = fx_read(st->fx.e, t->fp, t->buf2, CHAOS_MAX + 8, 0);
	if (n2 != n || memcmp(t->buf, t->buf2, (size_t)n) != 0) {
		failf(st, "chaos file changed by growing and shrinking back "
			  "(%zd bytes, then %zd)", n, n2);
		return -1;
	}
	atomic_fetch_add(&st->cnt.chaos_stills, 1);
	return n;
}

static void *chaos_reader(void *arg)
{
	struct chaos_thread *t = arg;
	struct stress *st = t->st;
	struct chaos *ch = &st->ch;

	for (unsigned long i = 1; !stopping(st); i++) {
		ssize_t n;

		if (i % QUIESCE_EVERY == 0) {
			atomic_store(&t->doing, "closing the gate");
			gate_close(&ch->gate);
			atomic_store(&t->doing, "a check with all still");
			n = chaos_still_check(t);
			gate_open(&ch->gate);
		} else {
			atomic_store(&t->doing, "a read, at the gate");
			gate_enter(&ch->gate);
			atomic_store(&t->doing, "a read check");
			n = chaos_read_check(t, t->buf, "a read");
			gate_leave(&ch->gate);
		}
		atomic_store(&t->doing, "between reads");
		if (n < 0)
			break;
		atomic_fetch_add(&st->cnt.chaos_reads, 1);
	}
	return NULL;
}

/* --- the flusher -------------------------------------------------------- */

static void *flusher_main(void *arg)
{
	struct stress *st = arg;
	struct eng *e = st->fx.e;
	uint64_t rng = splitmix(st->seed ^ 0xf1u);

	while (!stopping(st)) {
		struct eng_flush_progress p = { 0 };
		struct timespec t0, now;
		uint64_t ticket, last_files = 0, last_bytes = 0;
		struct eng_stats s;
		int rc;

		atomic_store(&st->flusher_doing, "eng_flush_request");
		rc = eng_flush_request(e, &ticket);
		if (rc < 0) {
			failf(st, "flush request: %s", strerror(-rc));
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		atomic_store(&st->flusher_doing, "eng_flush_progress");
		while (!atomic_load(&st->stop)) {
			rc = eng_flush_progress(e, ticket, &p);
			if (rc < 0 || p.files_done > p.files_total ||
			    p.bytes_done > p.bytes_total ||
			    p.files_done < last_files ||
			    p.bytes_done < last_bytes) {
				failf(st, "flush %llu: %s, files %llu/%llu, "
					  "bytes %llu/%llu",
				      (unsigned long long)ticket,
				      strerror(-rc),
				      (unsigned long long)p.files_done,
				      (unsigned long long)p.files_total,
				      (unsigned long long)p.bytes_done,
				      (unsigned long long)p.bytes_total);
				return NULL;
			}
			if (p.finished)
				break;
			last_files = p.files_done;
			last_bytes = p.bytes_done;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - t0.tv_sec > FLUSH_TIMEOUT_S) {
				failf(st, "flush %llu did not finish in %d s",
				      (unsigned long long)ticket,
				      FLUSH_TIMEOUT_S);
				return NULL;
			}
			usleep(2000);
		}
		if (p.finished && p.error) {
			failf(st, "flush %llu finished with an error: %s",
			      (unsigned long long)ticket, strerror(-p.error));
			break;
		}
		atomic_fetch_add(&st->cnt.flushes, p.finished);
		atomic_store(&st->flusher_doing, "eng_get_stats");
		eng_get_stats(e, &s);
		if (s.chunks_used > s.chunks_total) {
			failf(st, "stats: %llu of %llu chunks used",
			      (unsigned long long)s.chunks_used,
			      (unsigned long long)s.chunks_total);
			break;
		}
		atomic_store(&st->flusher_doing, "between flushes");
		usleep((useconds_t)rnd_below(&rng, 20000));
	}
	return NULL;
}

/* --- checks with every thread stopped ----------------------------------- */

/* Flush everything and wait; returns the flush's error. */
static int flush_wait(struct eng *e)
{
	struct eng_flush_progress p;
	uint64_t ticket;

	assert_int_equal(eng_flush_request(e, &ticket), 0);
	for (int i = 0; i < FLUSH_TIMEOUT_S * 100; i++) {
		assert_int_equal(eng_flush_progress(e, ticket, &p), 0);
		if (p.finished)
			return p.error;
		usleep(10 * 1000);
	}
	fail_msg("flush did not finish in %d s", FLUSH_TIMEOUT_S);
	return -ETIMEDOUT;
}

static uint64_t lookup(struct eng *e, uint64_t parent, const char *name)
{
	struct stat sb;

	assert_int_equal(eng_lookup(e, parent, name, &sb), 0);
	eng_forget(e, sb.st_ino, 1);
	return sb.st_ino;
}

struct names {
	unsigned count;
	bool seen[NFILES];
	char odd[NAME_MAX + 1]; /* a name no model has */
};

static int name_cb(void *ctx, const char *name, const struct stat *sb,
		   off_t next)
{
	struct names *nm = ctx;

	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	nm->count++;
	if (name[0] == 'f' && name[1] >= '0' && name[1] < '0' + NFILES &&
	    name[2] == '\0')
		nm->seen[name[1] - '0'] = true;
	else
		snprintf(nm->odd, sizeof(nm->odd), "%s", name);
	return 0;
}

/*
 * Every name of worker @w's directory is in its model and reads back
 * whole as its model, through a new handle.
 */
static void check_worker_files(struct worker *w)
{
	struct eng *e = weng(w);
	struct names nm = { 0 };
	struct eng_dir *d;
	unsigned present = 0;

	assert_int_equal(eng_opendir(e, w->dir, &d), 0);
	assert_int_equal(eng_readdir(e, d, 0, name_cb, &nm), 0);
	eng_releasedir(e, d);
	for (int i = 0; i < NFILES; i++) {
		struct eng_file *fp;

		if (nm.seen[i] != w->f[i].present)
			wfail(w, "f%d is %s the directory but %s the model",
			      i, nm.seen[i] ? "in" : "not in",
			      w->f[i].present ? "in" : "not in");
		if (!w->f[i].present || !nm.seen[i])
			continue;
		present++;
		if (open_name(w, i, O_RDONLY, &fp) < 0)
			continue;
		check_read(w, i, fp, 0, FILE_MAX, " by a new handle");
		eng_release(e, fp);
	}
	if (nm.count != present)
		wfail(w, "directory t%d has %u entries, the model %u (\"%s\")",
		      w->id, nm.count, present, nm.odd);
}

/* --- the tests --------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static int group_setup(void **state)
{
	struct stress *st = calloc(1, sizeof(*st));
	struct stat sb;
	struct eng *e;

	if (!st)
		return -1;
	st->seed = env_u64("RFT_STRESS_SEED",
			   (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20);
	st->ops = (unsigned long)env_u64("RFT_STRESS_OPS", DEFAULT_OPS);
	printf("stress: seed %llu (replay: RFT_STRESS_SEED=%llu "
	       "RFT_STRESS_OPS=%lu)\n", (unsigned long long)st->seed,
	       (unsigned long long)st->seed, st->ops);
	fflush(stdout);
	pthread_mutex_init(&st->fail_lock, NULL);
	atomic_store(&st->clock, 1);

	fx_dirs(&st->fx);
	if (fx_start(&st->fx, STRESS_MEM, true, 1) < 0)
		return -1;
	e = st->fx.e;
	/* No allocation has run yet: the hook is in place before any. */
	e->store.pressure = pressure_probe;
	e->store.pressure_ctx = st;

	/*
	 * One checkpoint directory per worker and one for the chaos file,
	 * then an empty newest one: with --keep 1 it is the only one kept in
	 * memory, so every file may be evicted once written back.
	 */
	if (eng_mkdir(e, RFT_ROOT_INO, "chaos", 0755, 0, 0, &sb) < 0)
		return -1;
	st->ch.dir = sb.st_ino;
	for (int i = 0; i < NWORKERS; i++) {
		struct worker *w = &st->w[i];
		char name[8];

		snprintf(name, sizeof(name), "t%d", i);
		if (eng_mkdir(e, RFT_ROOT_INO, name, 0755, 0, 0, &sb) < 0)
			return -1;
		w->st = st;
		w->id = i;
		w->dir = sb.st_ino;
		w->rng = splitmix(st->seed + (uint64_t)i);
		w->wbuf = malloc(FILE_MAX);
		w->rbuf = malloc(FILE_MAX);
		if (!w->wbuf || !w->rbuf)
			return -1;
		for (int j = 0; j < NFILES; j++)
			if (!(w->f[j].data = calloc(1, FILE_MAX)))
				return -1;
	}
	if (eng_mkdir(e, RFT_ROOT_INO, "newest", 0755, 0, 0, &sb) < 0)
		return -1;

	st->ch.wdone = calloc(CHAOS_IDS, sizeof(*st->ch.wdone));
	st->ch.cuts = calloc(CHAOS_CUTS, sizeof(*st->ch.cuts));
	st->ch.final = malloc(CHAOS_GROWN);
	if (!st->ch.wdone || !st->ch.cuts || !st->ch.final)
		return -1;
	atomic_store(&st->ch.next_id, 1);
	pthread_mutex_init(&st->ch.gate.lock, NULL);
	pthread_cond_init(&st->ch.gate.cond, NULL);
	for (int i = 0; i < CHAOS_THREADS; i++) {
		struct chaos_thread *t = &st->ch.t[i];

		t->st = st;
		t->id = i;
		t->rng = splitmix(st->seed + 100 + (uint64_t)i);
		t->buf = malloc(CHAOS_GROWN);
		t->buf2 = malloc(CHAOS_GROWN);
		t->min = malloc((CHAOS_CUTS + 1) * sizeof(*t->min));
		if (!t->buf || !t->buf2 || !t->min)
			return -1;
		if (i == 0) {
			if (eng_create(e, st->ch.dir, "shared", 0644, 0, 0,
				       O_CREAT | O_EXCL | O_RDWR, &sb, &t->fp,
				       NULL) < 0)
				return -1;
			eng_forget(e, sb.st_ino, 1);
			st->ch.ino = sb.st_ino;
		} else if (eng_open(e, st->ch.ino, O_RDWR, &t->fp, NULL) < 0) {
			return -1;
		}
	}
	*state = st;
	return 0;
}

static int group_teardown(void **state)
{
	struct stress *st = *state;

	fx_cleanup(&st->fx);
	for (int i = 0; i < NWORKERS; i++) {
		free(st->w[i].wbuf);
		free(st->w[i].rbuf);
		for (int j = 0; j < NFILES; j++)
			free(st->w[i].f[j].data);
	}
	for (int i = 0; i < CHAOS_THREADS; i++) {
		free(st->ch.t[i].buf);
		free(st->ch.t[i].buf2);
		free(st->ch.t[i].min);
	}
	free(st->ch.wdone);
	free(st->ch.cuts);
	free(st->ch.final);
	pthread_mutex_destroy(&st->ch.gate.lock);
	pthread_cond_destroy(&st->ch.gate.cond);
	pthread_mutex_destroy(&st->fail_lock);
	free(st);
	return 0;
}

static void print_counters(struct stress *st, double secs)
{
	struct counters *c = &st->cnt;
	struct eng_stats s;

	eng_get_stats(st->fx.e, &s);
	printf("stress: %.1f s, %llu worker calls; writes %llu "
	       "(%llu ENOSPC, %llu short), %llu queued, reads %llu ENOSPC; "
	       "%llu truncates, %llu O_TRUNC opens, %llu renames over, "
	       "%llu unlinks, %llu fallocates (%llu ENOSPC)\n",
	       secs, (unsigned long long)c->calls,
	       (unsigned long long)s.write_ops,
	       (unsigned long long)c->enospc_writes,
	       (unsigned long long)c->short_writes,
	       (unsigned long long)c->queued,
	       (unsigned long long)c->enospc_reads,
	       (unsigned long long)c->truncates,
	       (unsigned long long)c->trunc_opens,
	       (unsigned long long)c->renames_over,
	       (unsigned long long)c->unlinks,
	       (unsigned long long)c->fallocates,
	       (unsigned long long)c->enospc_fallocates);
	printf("stress: chaos %llu writes, %llu truncates, %llu reads, "
	       "%llu still checks; %llu flushes; engine: %llu ENOSPC, "
	       "%llu evicted, %llu read through, %llu written back; "
	       "%llu probes\n",
	       (unsigned long long)c->chaos_writes,
	       (unsigned long long)c->chaos_cuts,
	       (unsigned long long)c->chaos_reads,
	       (unsigned long long)c->chaos_stills,
	       (unsigned long long)c->flushes,
	       (unsigned long long)s.enospc,
	       (unsigned long long)s.evicted_chunks,
	       (unsigned long long)s.readthrough_chunks,
	       (unsigned long long)s.persist_files,
	       (unsigned long long)c->probes_run);
	fflush(stdout);
}

/* Every thread at once; each checks as it goes. */
/*
 * The watchdog's report: each thread's call in progress.  The workers'
 * notes are read racily; only a hung run gets here.
 */
static void stress_report(void *arg)
{
	struct stress *st = arg;
	static const char *const chaos_name[CHAOS_THREADS] = {
		"chaos writer 0", "chaos writer 1", "chaos truncator",
		"chaos reader",
	};
	const char *f = atomic_load(&st->flusher_doing);

	fprintf(stderr, "stress: seed %llu, %lu calls per worker\n",
		(unsigned long long)st->seed, st->ops);
	for (int i = 0; i < NWORKERS; i++)
		fprintf(stderr, "  worker %d (%lu calls done): %s\n", i,
			st->w[i].ops, st->w[i].hist[st->w[i].ops % HIST]);
	for (int i = 0; i < CHAOS_THREADS; i++) {
		const char *d = atomic_load(&st->ch.t[i].doing);

		fprintf(stderr, "  %s: %s\n", chaos_name[i], d ? d : "-");
	}
	fprintf(stderr, "  flusher: %s\n", f ? f : "-");
}

/*
 * Each test runs under a watchdog: calls stop at DEADLINE_S, so a test
 * still going long after is hung, and says where before meson kills it.
 * The teardown disarms it, also after a failed check.
 */
static int wd_setup(void **state)
{
	struct stress *st = *state;

	wd_arm(&st->wd, "stress", DEADLINE_S + 150, stress_report, st);
	return 0;
}

static int wd_teardown(void **state)
{
	struct stress *st = *state;

	wd_disarm(&st->wd);
	return 0;
}

static void test_concurrent_calls(void **state)
{
	static void *(*const chaos_fn[CHAOS_THREADS])(void *) = {
		chaos_writer, chaos_writer, chaos_truncator, chaos_reader,
	};
	struct stress *st = *state;
	struct timespec t0, t1;
	struct eng_stats s;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	st->deadline = t0;
	st->deadline.tv_sec += DEADLINE_S;
	for (int i = 0; i < NWORKERS; i++)
		assert_int_equal(pthread_create(&st->w[i].thread, NULL,
						worker_main, &st->w[i]), 0);
	for (int i = 0; i < CHAOS_THREADS; i++)
		assert_int_equal(pthread_create(&st->ch.t[i].thread, NULL,
						chaos_fn[i], &st->ch.t[i]),
				 0);
	assert_int_equal(pthread_create(&st->flusher, NULL, flusher_main, st),
			 0);

	/* The workers' calls bound the run; the others go on until then. */
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(st->w[i].thread, NULL);
	atomic_store(&st->stop, true);
	for (int i = 0; i < CHAOS_THREADS; i++)
		pthread_join(st->ch.t[i].thread, NULL);
	pthread_join(st->flusher, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	print_counters(st, (double)(t1.tv_sec - t0.tv_sec) +
				   (t1.tv_nsec - t0.tv_nsec) / 1e9);
	eng_get_stats(st->fx.e, &s);
	fail_since(st, 0);

	/* The run must have reached what it is meant to stress. */
	assert_true(st->cnt.queued > 0);
	assert_true(st->cnt.truncates > 0 && st->cnt.trunc_opens > 0);
	assert_true(st->cnt.renames_over > 0 && st->cnt.unlinks > 0);
	assert_true(st->cnt.chaos_cuts > 0 && st->cnt.chaos_stills > 0);
	assert_true(st->cnt.flushes > 0);
	assert_true(s.enospc > 0);
	assert_true(s.evicted_chunks > 0);
	assert_true(s.readthrough_chunks > 0);
}

/*
 * With every thread stopped: open handles and new ones read each file as
 * its model; the chaos file holds only words its writes put there, and
 * one more sequence of calls on it lands exactly.
 */
static void test_final_contents(void **state)
{
	struct stress *st = *state;
	struct eng *e = st->fx.e;
	struct chaos *ch = &st->ch;
	uint8_t *ref = ch->final;
	unsigned from = nfailed(st);
	struct eng_file *fp;
	struct abuf *b;
	bool queued;
	ssize_t n;

	/* A worker that failed has no model worth checking: close only. */
	for (int i = 0; i < NWORKERS; i++) {
		struct worker *w = &st->w[i];

		for (int j = 0; j < NFILES; j++) {
			if (!w->failed)
				drop_victim(w, j, " through a handle kept open");
			else if (w->f[j].fp)
				eng_release(e, w->f[j].fp);
			w->f[j].fp = NULL;
		}
	}
	chaos_still_check(&ch->t[CHAOS_THREADS - 1]);
	for (int i = 0; i < CHAOS_THREADS; i++)
		eng_release(e, ch->t[i].fp);
	/* Closes wait for queued copies: each has called back once. */
	assert_int_equal(atomic_load(&st->cnt.done),
			 atomic_load(&st->cnt.queued));

	/* Written back, everything may be evicted and read back in. */
	assert_int_equal(flush_wait(e), 0);
	st->all_closed = true;
	for (int i = 0; i < NWORKERS; i++)
		if (!st->w[i].failed)
			check_worker_files(&st->w[i]);
	fail_since(st, from);

	/*
	 * The chaos file, now with one writer: a write, a queued write over
	 * its end, a truncate into both, a queued write past a hole, growth.
	 */
	assert_int_equal(eng_open(e, ch->ino, O_RDWR, &fp, NULL), 0);
	memset(ref, 0, CHAOS_GROWN);
	assert_int_equal(chaos_set_size(st, fp, 0), 0);
	chaos_fill(ref, CHAOS_IDS, 0, MiB + MiB / 2);
	assert_int_equal(eng_write(e, fp, ref, MiB + MiB / 2, 0),
			 MiB + MiB / 2);
	b = malloc(sizeof(*b) + MiB);
	assert_non_null(b);
	b->st = st;
	chaos_fill(b->data, CHAOS_IDS + 1, MiB - 8, MiB);
	memcpy(ref + MiB - 8, b->data, MiB);
	assert_int_equal(eng_write_async(e, fp, b->data, MiB, MiB - 8,
					 async_done, b, &queued), MiB);
	if (!queued)
		free(b);
	assert_int_equal(chaos_set_size(st, fp, MiB + 100), 0);
	memset(ref + MiB + 100, 0, CHAOS_GROWN - MiB - 100);
	b = malloc(sizeof(*b) + 4096);
	assert_non_null(b);
	b->st = st;
	chaos_fill(b->data, CHAOS_IDS + 2, 2 * MiB, 4096);
	memcpy(ref + 2 * MiB, b->data, 4096);
	assert_int_equal(eng_write_async(e, fp, b->data, 4096, 2 * MiB,
					 async_done, b, &queued), 4096);
	if (!queued)
		free(b);
	assert_int_equal(chaos_set_size(st, fp, CHAOS_MAX), 0);
	ch->final_size = CHAOS_MAX;
	n = fx_read(e, fp, ch->t[0].buf, CHAOS_GROWN, 0);
	assert_int_equal(n, CHAOS_MAX);
	assert_memory_equal(ch->t[0].buf, ref, CHAOS_MAX);
	eng_release(e, fp);
	fail_since(st, from);
}

/*
 * A clean stop writes back every sealed file (--unmount-flush all); a new
 * engine on the same persist dir must show every name and byte again.
 */
static void test_remount(void **state)
{
	struct stress *st = *state;
	unsigned from = nfailed(st);
	struct chaos *ch = &st->ch;
	struct eng_file *fp;
	struct eng *e;
	ssize_t n;

	assert_int_equal(eng_stop(st->fx.e), 0);
	eng_free(st->fx.e);
	st->fx.e = NULL;
	assert_int_equal(fx_start(&st->fx, STRESS_MEM, true, 1), 0);
	e = st->fx.e;

	for (int i = 0; i < NWORKERS; i++) {
		struct worker *w = &st->w[i];
		char name[8];

		if (w->failed)
			continue;
		snprintf(name, sizeof(name), "t%d", i);
		w->dir = lookup(e, RFT_ROOT_INO, name);
		/* New inode numbers: take them from the names. */
		for (int j = 0; j < NFILES; j++) {
			struct stat sb;

			fname(j, name);
			if (w->f[j].present &&
			    eng_lookup(e, w->dir, name, &sb) == 0) {
				w->f[j].ino = sb.st_ino;
				eng_forget(e, sb.st_ino, 1);
			}
		}
		check_worker_files(w);
	}
	fail_since(st, from);

	ch->dir = lookup(e, RFT_ROOT_INO, "chaos");
	assert_int_equal(eng_open(e, lookup(e, ch->dir, "shared"), O_RDONLY,
				  &fp, NULL), 0);
	n = fx_read(e, fp, ch->t[0].buf, CHAOS_GROWN, 0);
	assert_int_equal(n, (ssize_t)ch->final_size);
	assert_memory_equal(ch->t[0].buf, ch->final, ch->final_size);
	eng_release(e, fp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_concurrent_calls,
						wd_setup, wd_teardown),
		cmocka_unit_test_setup_teardown(test_final_contents,
						wd_setup, wd_teardown),
		cmocka_unit_test_setup_teardown(test_remount, wd_setup,
						wd_teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
