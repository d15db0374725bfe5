/*
 * peer.c - what every peer transport shares: the table of modules by frame
 * type, routing of received frames, request/reply calls with timeouts, and
 * the per-peer counters.  The transports (peer_tcp.c, and the unit tests'
 * peer_fake.c) move bytes; they call peer_base_* on their receive threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "group_i.h"
#include "rft_le.h"

/* A peer_call() waiting for its reply.  Lives on the caller's stack. */
struct peer_call {
	struct peer_call *next;	/* x->calls, protected by x->calls_lock */
	uint64_t rid;
	int node;
	uint64_t gen;		/* the link the request went on; 0: unsent */
	struct peer_reply *rep;
	int rc;
	bool done;
	bool receiving;		/* a bulk is being written into rep->bulk */
	pthread_cond_t cond;
};

int peer_base_init(struct peer_xport *x, const struct peer_xport_ops *ops,
		   int self, int nodes, uint64_t incarnation)
{
	if (nodes < 1 || nodes > GRP_MAX_NODES || self < 0 || self >= nodes)
		return -EINVAL;
	memset(x, 0, sizeof(*x));
	x->ops = ops;
	x->self = self;
	x->nodes = nodes;
	x->incarnation = incarnation;
	x->cnt = calloc((size_t)nodes, sizeof(*x->cnt));
	x->down_gen = calloc((size_t)nodes, sizeof(*x->down_gen));
	if (!x->cnt || !x->down_gen) {
		free(x->cnt);
		free(x->down_gen);
		return -ENOMEM;
	}
	pthread_mutex_init(&x->calls_lock, NULL);
	return 0;
}

void peer_base_fini(struct peer_xport *x)
{
	free(x->cnt);
	free(x->down_gen);
	x->cnt = NULL;
	x->down_gen = NULL;
	pthread_mutex_destroy(&x->calls_lock);
}

int peer_register(struct peer_xport *x, uint16_t lo, uint16_t hi,
		  const struct peer_rx *rx)
{
	int i;

	if (x->started)
		return -EBUSY;
	if (lo > hi || hi > PEER_T_MAX || lo < PEER_T_MEMB_FIRST || !rx ||
	    !rx->deliver)
		return -EINVAL;
	for (i = 0; i < x->nhandlers; i++)
		if (lo <= x->handler[i].hi && x->handler[i].lo <= hi)
			return -EEXIST;
	if (x->nhandlers == PEER_MAX_HANDLERS)
		return -ENOSPC;
	x->handler[x->nhandlers].lo = lo;
	x->handler[x->nhandlers].hi = hi;
	x->handler[x->nhandlers].rx = *rx;
	x->nhandlers++;
	return 0;
}

int peer_start(struct peer_xport *x)
{
	int rc;

	if (x->started)
		return -EBUSY;
	x->started = true;
	rc = x->ops->start(x);
	if (rc < 0)
		x->started = false;
	return rc;
}

static bool frame_ok(const struct peer_xport *x, int node,
		     const struct peer_frame *f)
{
	return node >= 0 && node < x->nodes && node != x->self &&
	       f->meta_len <= PEER_META_MAX && f->bulk_len <= PEER_BULK_MAX &&
	       (f->meta_len == 0 || f->meta) && (f->bulk_len == 0 || f->bulk);
}

static int send_frame(struct peer_xport *x, int node,
		      const struct peer_frame *f, int timeout_ms, uint64_t *gen)
{
	int rc;

	if (!frame_ok(x, node, f))
		return -EINVAL;
	if (!x->started)
		return -ENOTCONN;
	rc = x->ops->send(x, node, f, timeout_ms, gen);
	if (rc == 0) {
		atomic_fetch_add(&x->cnt[node].frames_out, 1);
		atomic_fetch_add(&x->cnt[node].bytes_out,
				 (uint64_t)WIRE_HDR_LEN + f->meta_len +
					 f->bulk_len);
	}
	return rc;
}

int peer_send(struct peer_xport *x, int node, const struct peer_frame *f,
	      int timeout_ms)
{
	uint64_t gen;

	return send_frame(x, node, f, timeout_ms, &gen);
}

int peer_set_addr(struct peer_xport *x, int node, const char *addr)
{
	if (node < 0 || node >= x->nodes || node == x->self || !addr)
		return -EINVAL;
	return x->ops->set_addr(x, node, addr);
}

void peer_drop(struct peer_xport *x, int node)
{
	if (node >= 0 && node < x->nodes && node != x->self && x->started)
		x->ops->drop(x, node);
}

void peer_stop(struct peer_xport *x)
{
	struct peer_call *c;

	if (!x || !x->started)
		return;
	x->ops->stop(x);
	/* No receive thread runs any more: fail whatever still waits. */
	pthread_mutex_lock(&x->calls_lock);
	for (c = x->calls; c; c = c->next) {
		if (c->done)
			continue;
		c->rc = -ESHUTDOWN;
		c->done = true;
		c->receiving = false;
		pthread_cond_signal(&c->cond);
	}
	x->started = false;
	pthread_mutex_unlock(&x->calls_lock);
}

void peer_free(struct peer_xport *x)
{
	if (!x)
		return;
	peer_stop(x);
	x->ops->free(x);
}

void peer_stats(struct peer_xport *x, int node, struct peer_stats *out)
{
	struct peer_counters *c;

	memset(out, 0, sizeof(*out));
	if (node < 0 || node >= x->nodes)
		return;
	c = &x->cnt[node];
	out->frames_out = atomic_load(&c->frames_out);
	out->bytes_out = atomic_load(&c->bytes_out);
	out->frames_in = atomic_load(&c->frames_in);
	out->bytes_in = atomic_load(&c->bytes_in);
	out->connects = atomic_load(&c->connects);
	out->auth_failed = atomic_load(&c->auth_failed);
	out->bad_frames = atomic_load(&c->bad_frames);
	out->crc_errors = atomic_load(&c->crc_errors);
	out->unknown_type = atomic_load(&c->unknown_type);
	out->call_timeouts = atomic_load(&c->call_timeouts);
	out->up = atomic_load(&c->up);
	out->incarnation = atomic_load(&c->incarnation);
}

/* --- calls --------------------------------------------------------------- */

/* The pending call for a reply (rid, node).  Under x->calls_lock. */
static struct peer_call *call_find(struct peer_xport *x, int node,
				   uint64_t rid)
{
	struct peer_call *c;

	for (c = x->calls; c; c = c->next)
		if (c->rid == rid && c->node == node && !c->done)
			return c;
	return NULL;
}

static void call_unlink(struct peer_xport *x, struct peer_call *call)
{
	struct peer_call **pp;

	for (pp = &x->calls; *pp; pp = &(*pp)->next)
		if (*pp == call) {
			*pp = call->next;
			return;
		}
}

int peer_call(struct peer_xport *x, int node, struct peer_frame *req,
	      struct peer_reply *rep, int timeout_ms)
{
	struct peer_call call = { .node = node, .rep = rep };
	struct timespec deadline;
	uint64_t gen = 0;
	int rc;

	if (!frame_ok(x, node, req) || (req->flags & PEER_F_REPLY))
		return -EINVAL;
	rep->meta_len = rep->bulk_len = rep->bulk_crc = 0;
	rep->type = 0;
	rft_cond_init(&call.cond);

	pthread_mutex_lock(&x->calls_lock);
	if (!x->started) {
		pthread_mutex_unlock(&x->calls_lock);
		rc = -ESHUTDOWN;
		goto out;
	}
	call.rid = ++x->next_rid;
	call.next = x->calls;
	x->calls = &call;
	pthread_mutex_unlock(&x->calls_lock);

	req->rid = call.rid;
	rft_deadline_ts(&deadline, timeout_ms > 0 ? (uint64_t)timeout_ms : 0);
	rc = send_frame(x, node, req, timeout_ms, &gen);

	pthread_mutex_lock(&x->calls_lock);
	if (rc == 0) {
		/*
		 * Only the link the request went on can fail it, and that
		 * link may have been announced down already.
		 */
		call.gen = gen;
		if (!call.done && !call.receiving &&
		    x->down_gen[node] >= gen) {
			call.rc = -ECONNRESET;
			call.done = true;
		}
		while (!call.done) {
			if (pthread_cond_timedwait(&call.cond, &x->calls_lock,
						   &deadline) != ETIMEDOUT)
				continue;
			if (call.done)
				break;
			if (call.receiving) {
				/*
				 * The bulk is being written into the caller's
				 * buffer: the transport finishes or fails it
				 * (its own idle timeout bounds this).
				 */
				pthread_cond_wait(&call.cond, &x->calls_lock);
				continue;
			}
			atomic_fetch_add(&x->cnt[node].call_timeouts, 1);
			call.rc = -ETIMEDOUT;
			call.done = true;
		}
		rc = call.rc;
	}
	call_unlink(x, &call);
	pthread_mutex_unlock(&x->calls_lock);
out:
	pthread_cond_destroy(&call.cond);
	return rc;
}

int peer_reply(struct peer_xport *x, int node, const struct peer_frame *req,
	       struct peer_frame *rep, int timeout_ms)
{
	rep->type = req->type;
	rep->rid = req->rid;
	rep->flags |= PEER_F_REPLY;
	return peer_send(x, node, rep, timeout_ms);
}

int peer_reply_err(struct peer_xport *x, int node,
		   const struct peer_frame *req, int err, int timeout_ms)
{
	uint8_t meta[4];
	uint32_t e = (uint32_t)(int32_t)err;
	struct peer_frame rep = {
		.type = req->type,
		.flags = PEER_F_REPLY | PEER_F_ERROR,
		.meta = meta,
		.meta_len = sizeof(meta),
	};

	rft_put_le32(meta, e);
	return peer_reply(x, node, req, &rep, timeout_ms);
}

/* --- receive side, for the transports ------------------------------------ */

static const struct peer_rx *handler_for(struct peer_xport *x, uint16_t type)
{
	int i;

	for (i = 0; i < x->nhandlers; i++)
		if (type >= x->handler[i].lo && type <= x->handler[i].hi)
			return &x->handler[i].rx;
	return NULL;
}

void *peer_base_bulk_dest(struct peer_xport *x, int node,
			  const struct peer_frame *f, void **cookie)
{
	const struct peer_rx *rx;
	struct peer_call *c;
	void *dst = NULL;

	*cookie = NULL;
	if (f->flags & PEER_F_REPLY) {
		if (f->flags & PEER_F_ERROR)
			return NULL;
		pthread_mutex_lock(&x->calls_lock);
		c = call_find(x, node, f->rid);
		if (c && c->rep->bulk && f->bulk_len <= c->rep->bulk_cap) {
			c->receiving = true;
			*cookie = c;
			dst = c->rep->bulk;
		}
		pthread_mutex_unlock(&x->calls_lock);
		return dst;
	}
	rx = handler_for(x, f->type);
	if (!rx || !rx->bulk_dest)
		return NULL;
	return rx->bulk_dest(rx->ctx, node, f, cookie);
}

static int le32_errno(const struct peer_frame *f)
{
	int32_t e;

	if (f->meta_len != 4)
		return -EPROTO;
	e = (int32_t)rft_get_le32(f->meta);
	/* Only a plausible -errno; anything else is a broken peer. */
	return e < 0 && e > -4096 ? e : -EPROTO;
}

/* Complete the call a reply answers.  Returns 0 (stale replies are fine). */
static int deliver_reply(struct peer_xport *x, int node,
			 const struct peer_frame *f, struct peer_call *c,
			 int bulk_rc)
{
	struct peer_reply *rep;

	pthread_mutex_lock(&x->calls_lock);
	if (!c)
		c = call_find(x, node, f->rid);
	if (!c || c->done) {
		pthread_mutex_unlock(&x->calls_lock);
		return 0; /* its caller gave up: drop it */
	}
	rep = c->rep;
	c->rc = 0;
	if (f->flags & PEER_F_ERROR) {
		c->rc = le32_errno(f);
	} else if (f->meta_len > rep->meta_cap) {
		c->rc = -EMSGSIZE;
	} else if (f->bulk_len > 0 && !c->receiving) {
		/* Not received into the caller's buffer: it did not fit. */
		c->rc = -EMSGSIZE;
	} else if (bulk_rc < 0) {
		c->rc = bulk_rc;
	} else {
		if (f->meta_len)
			memcpy(rep->meta, f->meta, f->meta_len);
		rep->meta_len = f->meta_len;
		rep->bulk_len = f->bulk_len;
		rep->bulk_crc = f->bulk_crc;
		rep->type = f->type;
	}
	c->receiving = false;
	c->done = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&x->calls_lock);
	return 0;
}

int peer_base_deliver(struct peer_xport *x, int node,
		      const struct peer_frame *f, void *cookie, int bulk_rc)
{
	const struct peer_rx *rx;

	if (node < 0 || node >= x->nodes)
		return -EPROTO;
	if (bulk_rc == -EBADMSG)
		atomic_fetch_add(&x->cnt[node].crc_errors, 1);
	if (bulk_rc != -ECONNRESET) {
		atomic_fetch_add(&x->cnt[node].frames_in, 1);
		atomic_fetch_add(&x->cnt[node].bytes_in,
				 (uint64_t)WIRE_HDR_LEN + f->meta_len +
					 f->bulk_len);
	}
	if (f->flags & PEER_F_REPLY)
		return deliver_reply(x, node, f, cookie, bulk_rc);
	rx = handler_for(x, f->type);
	if (!rx) {
		atomic_fetch_add(&x->cnt[node].unknown_type, 1);
		return -EPROTO;
	}
	return rx->deliver(rx->ctx, node, f, cookie, bulk_rc);
}

void peer_base_calls_lost(struct peer_xport *x, int node, uint64_t gen)
{
	struct peer_call *c;

	if (node < 0 || node >= x->nodes)
		return;
	/*
	 * Replies can no longer come for requests sent on link @gen or an
	 * older one.  Those sent on a newer link (a call that made a new
	 * connection before the old one's end was announced) wait on.
	 */
	pthread_mutex_lock(&x->calls_lock);
	if (gen > x->down_gen[node])
		x->down_gen[node] = gen;
	for (c = x->calls; c; c = c->next) {
		if (c->node != node || c->done || c->receiving ||
		    c->gen == 0 || c->gen > gen)
			continue;
		c->rc = -ECONNRESET;
		c->done = true;
		pthread_cond_signal(&c->cond);
	}
	pthread_mutex_unlock(&x->calls_lock);
}

void peer_base_link(struct peer_xport *x, int node, uint64_t incarnation,
		    uint64_t gen, bool up)
{
	int i;

	if (node < 0 || node >= x->nodes)
		return;
	atomic_store(&x->cnt[node].up, up);
	if (up) {
		atomic_store(&x->cnt[node].incarnation, incarnation);
		atomic_fetch_add(&x->cnt[node].connects, 1);
	} else {
		peer_base_calls_lost(x, node, gen);
	}
	for (i = 0; i < x->nhandlers; i++)
		if (x->handler[i].rx.link)
			x->handler[i].rx.link(x->handler[i].rx.ctx, node,
					      incarnation, up);
}
