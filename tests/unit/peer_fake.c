/*
 * peer_fake.c - an in-process transport for unit tests: the endpoints of a
 * group joined by a fake network that delays, loses, cuts and freezes.
 *
 * The model, meant to look like TCP between daemons:
 *
 *  - A link joins two started endpoints.  It comes up at the first send
 *    between them (both sides get link(up) with the other's incarnation,
 *    before any frame on it) and goes down on a cut, a random drop, a
 *    peer_drop(), a frame a module refused (-EPROTO), or the stop of
 *    either endpoint (the survivor gets link(down)).  The next send makes
 *    a new link, as TCP reconnects.
 *  - Frames from A to B arrive in the order they were sent, each after a
 *    delay d drawn from [min_ms, max_ms] (but never before the previous
 *    frame of that direction).  A frame with bulk has its meta arrive at d
 *    (bulk_dest is asked then) and its bulk at d + d/2, so a link can die
 *    while a bulk is being received: deliver() then gets -ECONNRESET.
 *    Frames in flight on a link that goes down are lost.
 *  - peer_fakenet_drop(p): each frame, with probability p, is lost and its
 *    link goes down (the sender's send() still returns 0, as a write()
 *    into a socket that dies later does).
 *  - A cut link is a black hole: a send waits for a heal until its timeout
 *    and then fails -ENOTCONN ("no link could be made").  A send to a node
 *    with no started endpoint fails -ENOTCONN at once (connection refused).
 *  - A frozen node is a SIGSTOPped daemon: nothing is delivered to it (its
 *    frames queue up and arrive late when it is unfrozen); its own sends
 *    wait for the thaw until their timeout (-ETIMEDOUT); a send to it over
 *    a link that is up is accepted (the kernel would buffer it), one that
 *    needs a new link waits for the handshake, i.e. for the thaw
 *    (-ETIMEDOUT).  Frames it sent before the freeze still arrive.
 *  - Each endpoint has one delivery thread; callbacks run there, with no
 *    lock of this file held.
 *
 * Every random choice (delays, drops) comes from the net's seed; thread
 * scheduling still varies from run to run.
 *
 * Locking: one mutex per net (net->lock) protects everything below it,
 * and one condition variable (net->cond), broadcast on every change,
 * wakes delivery threads and waiting senders.  It is never held across a
 * callback into peer.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "group_test.h"

#define FAKE_ADDR_MAX 128

enum fake_kind {
	FAKE_FRAME,
	FAKE_LINK,
};

/* Something on its way to an endpoint: a frame or a link event. */
struct fake_item {
	struct fake_item *next;		/* the inbox, sorted by due */
	enum fake_kind kind;
	int from;
	uint64_t due;			/* ms: the meta (or the event) */
	uint64_t bulk_due;		/* ms: the whole bulk */
	uint64_t gen;			/* of the link it travels on */
	uint64_t inc;			/* FAKE_LINK: the peer's incarnation */
	bool up;			/* FAKE_LINK */
	struct peer_frame f;		/* meta and bulk point into data */
	uint8_t data[];
};

/* The link between nodes a < b, at net->link[a * nodes + b]. */
struct fake_link {
	bool cut;
	bool up;
	uint64_t gen;			/* +1 each time it comes up */
	uint64_t last_due[2];		/* [0]: a to b, [1]: b to a */
};

struct peer_fake {
	struct peer_xport x;		/* first: peer.c's part */
	struct peer_fakenet *net;
	pthread_t thread;
	bool running;			/* started, not stopping */
	bool thread_made;
	struct fake_item *inbox;
	char (*addr)[FAKE_ADDR_MAX];	/* [nodes], what set_addr gave */
};

struct peer_fakenet {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int nodes;
	uint64_t rng;
	int min_ms, max_ms;
	double drop_p;
	struct peer_fake *ep[GRP_MAX_NODES];	/* NULL: no endpoint */
	bool frozen[GRP_MAX_NODES];
	struct fake_link *link;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void ts_at(struct timespec *ts, uint64_t ms)
{
	ts->tv_sec = (time_t)(ms / 1000);
	ts->tv_nsec = (long)(ms % 1000) * 1000000L;
}

/* splitmix64: small, good enough and the same everywhere.  Under lock. */
static uint64_t rng_next(struct peer_fakenet *net)
{
	uint64_t z = (net->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static struct fake_link *link_of(struct peer_fakenet *net, int a, int b)
{
	return a < b ? &net->link[a * net->nodes + b]
		     : &net->link[b * net->nodes + a];
}

/* Wait on the net's condition until @deadline (ms) at most.  Under lock. */
static void wait_until(struct peer_fakenet *net, uint64_t deadline)
{
	struct timespec ts;

	ts_at(&ts, deadline);
	pthread_cond_timedwait(&net->cond, &net->lock, &ts);
}

/* Put @it into @ep's inbox after every item due no later.  Under lock. */
static void inbox_add(struct peer_fake *ep, struct fake_item *it)
{
	struct fake_item **pp = &ep->inbox;

	while (*pp && (*pp)->due <= it->due)
		pp = &(*pp)->next;
	it->next = *pp;
	*pp = it;
}

static int link_event(struct peer_fake *ep, int from, uint64_t inc, bool up,
		      uint64_t gen)
{
	struct fake_item *it = calloc(1, sizeof(*it));

	if (!it)
		return -ENOMEM;
	it->kind = FAKE_LINK;
	it->from = from;
	it->due = now_ms();
	it->gen = gen;
	it->inc = inc;
	it->up = up;
	inbox_add(ep, it);
	return 0;
}

/* Drop the frames between @a and @b still in @ep's inbox.  Under lock. */
static void inbox_purge(struct peer_fake *ep, int from)
{
	struct fake_item **pp = &ep->inbox, *it;

	while ((it = *pp)) {
		if (it->kind == FAKE_FRAME && it->from == from) {
			*pp = it->next;
			free(it);
		} else {
			pp = &it->next;
		}
	}
}

/*
 * Bring the link between @a and @b down: frames in flight are lost, each
 * running endpoint hears of it.  Under lock.
 */
static void link_down(struct peer_fakenet *net, int a, int b)
{
	struct fake_link *l = link_of(net, a, b);
	struct peer_fake *ea = net->ep[a], *eb = net->ep[b];

	if (!l->up)
		return;
	l->up = false;
	if (ea && ea->running) {
		inbox_purge(ea, b);
		if (link_event(ea, b, 0, false, l->gen) < 0)
			rft_err("fake net: no memory for a link event");
	}
	if (eb && eb->running) {
		inbox_purge(eb, a);
		if (link_event(eb, a, 0, false, l->gen) < 0)
			rft_err("fake net: no memory for a link event");
	}
	pthread_cond_broadcast(&net->cond);
}

/* Bring the link between two running endpoints up.  Under lock. */
static int link_up(struct peer_fakenet *net, struct peer_fake *ea,
		   struct peer_fake *eb)
{
	int a = ea->x.self, b = eb->x.self;
	struct fake_link *l = link_of(net, a, b);

	l->up = true;
	l->gen++;
	if (link_event(ea, b, eb->x.incarnation, true, l->gen) < 0 ||
	    link_event(eb, a, ea->x.incarnation, true, l->gen) < 0) {
		link_down(net, a, b);
		return -ENOMEM;
	}
	pthread_cond_broadcast(&net->cond);
	return 0;
}

static uint64_t draw_delay(struct peer_fakenet *net)
{
	uint64_t span = (uint64_t)(net->max_ms - net->min_ms) + 1;

	return (uint64_t)net->min_ms + rng_next(net) % span;
}

static bool draw_drop(struct peer_fakenet *net)
{
	if (net->drop_p <= 0)
		return false;
	return (double)(rng_next(net) >> 11) * 0x1.0p-53 < net->drop_p;
}

static int fake_send(struct peer_xport *x, int node, const struct peer_frame *f,
		     int timeout_ms, uint64_t *gen)
{
	struct peer_fake *ep = (struct peer_fake *)x;
	struct peer_fakenet *net = ep->net;
	uint64_t deadline = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms
								 : 0);
	struct fake_item *it;
	struct peer_fake *to;
	struct fake_link *l;
	uint64_t d, *last;
	int rc = 0, fail;

	it = malloc(sizeof(*it) + f->meta_len + f->bulk_len);
	if (!it)
		return -ENOMEM;
	memset(it, 0, sizeof(*it));
	it->kind = FAKE_FRAME;
	it->from = x->self;
	it->f = *f;
	it->f.meta = f->meta_len ? it->data : NULL;
	it->f.bulk = f->bulk_len ? it->data + f->meta_len : NULL;
	if (f->meta_len)
		memcpy(it->data, f->meta, f->meta_len);
	if (f->bulk_len)
		memcpy(it->data + f->meta_len, f->bulk, f->bulk_len);

	pthread_mutex_lock(&net->lock);
	l = link_of(net, x->self, node);
	for (;;) {
		to = net->ep[node];
		fail = 0;
		if (!ep->running) {
			rc = -ENOTCONN;
			break;
		}
		if (net->frozen[x->self]) {
			fail = -ETIMEDOUT; /* a stopped process sends nothing */
		} else if (l->up) {
			break;
		} else if (!to || !to->running) {
			rc = -ENOTCONN;		/* refused */
			break;
		} else if (l->cut) {
			fail = -ENOTCONN;	/* black hole */
		} else if (net->frozen[node]) {
			fail = -ETIMEDOUT;	/* no handshake from it */
		} else {
			rc = link_up(net, ep, to);
			if (rc < 0)
				break;
			continue;
		}
		if (now_ms() >= deadline) {
			rc = fail;
			break;
		}
		wait_until(net, deadline);
	}
	if (rc < 0) {
		pthread_mutex_unlock(&net->lock);
		free(it);
		return rc;
	}
	*gen = l->gen;
	if (draw_drop(net)) {
		link_down(net, x->self, node);
		pthread_mutex_unlock(&net->lock);
		free(it);
		return 0;
	}
	last = &l->last_due[x->self < node ? 0 : 1];
	d = draw_delay(net);
	it->gen = l->gen;
	it->due = now_ms() + d;
	if (it->due < *last)
		it->due = *last;
	it->bulk_due = it->due + (f->bulk_len ? d / 2 : 0);
	*last = it->bulk_due;
	inbox_add(to, it);
	pthread_cond_broadcast(&net->cond);
	pthread_mutex_unlock(&net->lock);
	return 0;
}

/* Is the link @it came on still the one that is up?  Under lock. */
static bool item_alive(struct peer_fake *ep, const struct fake_item *it)
{
	const struct fake_link *l = link_of(ep->net, ep->x.self, it->from);

	return ep->running && l->up && l->gen == it->gen;
}

/*
 * Deliver frame @it (out of the inbox, lock held on entry and on return):
 * ask for a bulk buffer, wait for the bulk's time, hand it over.
 */
static void deliver_frame(struct peer_fake *ep, struct fake_item *it)
{
	struct peer_fakenet *net = ep->net;
	struct peer_frame f = it->f;
	void *cookie = NULL, *dst = NULL;
	int bulk_rc = 0, rc;

	if (!item_alive(ep, it))
		return;
	pthread_mutex_unlock(&net->lock);
	if (f.bulk_len) {
		f.bulk = NULL;
		dst = peer_base_bulk_dest(&ep->x, it->from, &f, &cookie);
	}
	pthread_mutex_lock(&net->lock);
	if (f.bulk_len) {
		while (item_alive(ep, it) && now_ms() < it->bulk_due)
			wait_until(net, it->bulk_due);
		if (!item_alive(ep, it))
			bulk_rc = -ECONNRESET;
	}
	pthread_mutex_unlock(&net->lock);

	if (bulk_rc < 0 && !dst) {
		/* Only the transport knew of this frame: it is just lost. */
		pthread_mutex_lock(&net->lock);
		return;
	}
	if (f.bulk_len) {
		if (dst && bulk_rc == 0)
			memcpy(dst, it->f.bulk, f.bulk_len);
		f.bulk = dst ? dst : it->f.bulk;
	}
	rc = peer_base_deliver(&ep->x, it->from, &f, cookie, bulk_rc);
	pthread_mutex_lock(&net->lock);
	if (rc == -EPROTO) {
		atomic_fetch_add(&ep->x.cnt[it->from].bad_frames, 1);
		rft_warn("fake net: node %d refused a frame of type %u from "
			 "%d; link closed", ep->x.self, f.type, it->from);
		if (item_alive(ep, it))
			link_down(net, ep->x.self, it->from);
	}
}

static void *fake_thread(void *arg)
{
	struct peer_fake *ep = arg;
	struct peer_fakenet *net = ep->net;
	struct fake_item *it;
	uint64_t now;

	pthread_mutex_lock(&net->lock);
	while (ep->running) {
		it = ep->inbox;
		if (!it || net->frozen[ep->x.self]) {
			pthread_cond_wait(&net->cond, &net->lock);
			continue;
		}
		now = now_ms();
		if (it->due > now) {
			wait_until(net, it->due);
			continue;
		}
		ep->inbox = it->next;
		if (it->kind == FAKE_LINK) {
			pthread_mutex_unlock(&net->lock);
			peer_base_link(&ep->x, it->from, it->inc, it->gen,
				       it->up);
			pthread_mutex_lock(&net->lock);
		} else {
			deliver_frame(ep, it);
		}
		free(it);
	}
	pthread_mutex_unlock(&net->lock);
	return NULL;
}

static int fake_start(struct peer_xport *x)
{
	struct peer_fake *ep = (struct peer_fake *)x;
	struct peer_fakenet *net = ep->net;
	int rc;

	pthread_mutex_lock(&net->lock);
	ep->running = true;
	rc = -pthread_create(&ep->thread, NULL, fake_thread, ep);
	if (rc < 0)
		ep->running = false;
	else
		ep->thread_made = true;
	pthread_mutex_unlock(&net->lock);
	return rc;
}

static int fake_set_addr(struct peer_xport *x, int node, const char *addr)
{
	struct peer_fake *ep = (struct peer_fake *)x;

	if (strlen(addr) >= FAKE_ADDR_MAX)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&ep->net->lock);
	strcpy(ep->addr[node], addr);
	pthread_mutex_unlock(&ep->net->lock);
	return 0;
}

static void fake_drop(struct peer_xport *x, int node)
{
	struct peer_fake *ep = (struct peer_fake *)x;

	pthread_mutex_lock(&ep->net->lock);
	link_down(ep->net, x->self, node);
	pthread_mutex_unlock(&ep->net->lock);
}

static void fake_stop(struct peer_xport *x)
{
	struct peer_fake *ep = (struct peer_fake *)x;
	struct peer_fakenet *net = ep->net;
	struct fake_item *it;
	int i;

	pthread_mutex_lock(&net->lock);
	for (i = 0; i < net->nodes; i++)
		if (i != x->self)
			link_down(net, x->self, i);
	ep->running = false;
	while ((it = ep->inbox)) {
		ep->inbox = it->next;
		free(it);
	}
	pthread_cond_broadcast(&net->cond);
	pthread_mutex_unlock(&net->lock);
	if (ep->thread_made) {
		pthread_join(ep->thread, NULL);
		ep->thread_made = false;
	}
}

static void fake_free(struct peer_xport *x)
{
	struct peer_fake *ep = (struct peer_fake *)x;
	struct peer_fakenet *net = ep->net;

	fake_stop(x);
	pthread_mutex_lock(&net->lock);
	if (net->ep[x->self] == ep)
		net->ep[x->self] = NULL;
	pthread_mutex_unlock(&net->lock);
	peer_base_fini(x);
	free(ep->addr);
	free(ep);
}

static const struct peer_xport_ops fake_ops = {
	.start = fake_start,
	.send = fake_send,
	.set_addr = fake_set_addr,
	.drop = fake_drop,
	.stop = fake_stop,
	.free = fake_free,
};

struct peer_fakenet *peer_fakenet_new(int nodes, uint64_t seed)
{
	struct peer_fakenet *net;

	if (nodes < 1 || nodes > GRP_MAX_NODES)
		return NULL;
	net = calloc(1, sizeof(*net));
	if (!net)
		return NULL;
	net->link = calloc((size_t)nodes * (size_t)nodes, sizeof(*net->link));
	if (!net->link) {
		free(net);
		return NULL;
	}
	net->nodes = nodes;
	net->rng = seed;
	pthread_mutex_init(&net->lock, NULL);
	rft_cond_init(&net->cond);
	return net;
}

void peer_fakenet_free(struct peer_fakenet *net)
{
	int i;

	if (!net)
		return;
	for (i = 0; i < net->nodes; i++)
		if (net->ep[i])
			rft_err("fake net freed before the endpoint of node %d",
				i);
	pthread_cond_destroy(&net->cond);
	pthread_mutex_destroy(&net->lock);
	free(net->link);
	free(net);
}

int peer_fake_new(struct peer_fakenet *net, int self, uint64_t incarnation,
		  struct peer_xport **out)
{
	struct peer_fake *ep;
	int rc;

	*out = NULL;
	if (self < 0 || self >= net->nodes)
		return -EINVAL;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->addr = calloc((size_t)net->nodes, sizeof(*ep->addr));
	if (!ep->addr) {
		free(ep);
		return -ENOMEM;
	}
	rc = peer_base_init(&ep->x, &fake_ops, self, net->nodes, incarnation);
	if (rc < 0) {
		free(ep->addr);
		free(ep);
		return rc;
	}
	ep->net = net;
	pthread_mutex_lock(&net->lock);
	if (net->ep[self]) {
		pthread_mutex_unlock(&net->lock);
		peer_base_fini(&ep->x);
		free(ep->addr);
		free(ep);
		return -EEXIST;
	}
	net->ep[self] = ep;
	pthread_mutex_unlock(&net->lock);
	*out = &ep->x;
	return 0;
}

int peer_fake_addr(struct peer_xport *x, int node, char *buf, size_t len)
{
	struct peer_fake *ep = (struct peer_fake *)x;
	int rc = 0;

	if (x->ops != &fake_ops || node < 0 || node >= x->nodes || len == 0)
		return -EINVAL;
	pthread_mutex_lock(&ep->net->lock);
	if (strlen(ep->addr[node]) >= len)
		rc = -ENAMETOOLONG;
	else
		strcpy(buf, ep->addr[node]);
	pthread_mutex_unlock(&ep->net->lock);
	return rc;
}

void peer_fakenet_delay(struct peer_fakenet *net, int min_ms, int max_ms)
{
	if (min_ms < 0)
		min_ms = 0;
	if (max_ms < min_ms)
		max_ms = min_ms;
	pthread_mutex_lock(&net->lock);
	net->min_ms = min_ms;
	net->max_ms = max_ms;
	pthread_mutex_unlock(&net->lock);
}

void peer_fakenet_drop(struct peer_fakenet *net, double p)
{
	pthread_mutex_lock(&net->lock);
	net->drop_p = p;
	pthread_mutex_unlock(&net->lock);
}

void peer_fakenet_cut(struct peer_fakenet *net, int a, int b, bool cut)
{
	if (a < 0 || b < 0 || a >= net->nodes || b >= net->nodes || a == b)
		return;
	pthread_mutex_lock(&net->lock);
	link_of(net, a, b)->cut = cut;
	if (cut)
		link_down(net, a, b);
	pthread_cond_broadcast(&net->cond);
	pthread_mutex_unlock(&net->lock);
}

void peer_fakenet_partition(struct peer_fakenet *net, const int *side)
{
	int a, b;

	pthread_mutex_lock(&net->lock);
	for (a = 0; a < net->nodes; a++)
		for (b = a + 1; b < net->nodes; b++) {
			if (!side[a] == !side[b])
				continue;
			link_of(net, a, b)->cut = true;
			link_down(net, a, b);
		}
	pthread_mutex_unlock(&net->lock);
}

void peer_fakenet_heal(struct peer_fakenet *net)
{
	int a, b;

	pthread_mutex_lock(&net->lock);
	for (a = 0; a < net->nodes; a++)
		for (b = a + 1; b < net->nodes; b++)
			link_of(net, a, b)->cut = false;
	pthread_cond_broadcast(&net->cond);
	pthread_mutex_unlock(&net->lock);
}

void peer_fakenet_freeze(struct peer_fakenet *net, int node, bool frozen)
{
	if (node < 0 || node >= net->nodes)
		return;
	pthread_mutex_lock(&net->lock);
	net->frozen[node] = frozen;
	pthread_cond_broadcast(&net->cond);
	pthread_mutex_unlock(&net->lock);
}
