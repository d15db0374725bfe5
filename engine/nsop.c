/*
 * nsop.c - namespace operations as records, and their encoding.
 *
 * Every change to the namespace is a struct nsop.  On a single node the
 * engine applies it at once (ns_apply); in a group it is encoded here,
 * appended to the group's log, and applied from there on every node in log
 * order (gns.c).  So one function changes the namespace either way, and
 * what it changes depends only on the record and the state before it, the
 * same on every node.
 *
 * The encoding (docs/protocol.md, "Namespace log entries"), little-endian:
 *
 *    0 version   u8   NSOP_VERSION
 *    1 kind      u8   enum nsop_kind
 *    2 node      u16  the proposer (0xffff: none)
 *    4 flags     u32  per kind: open(2) flags, ENG_RENAME_*, ENG_SET_*
 *    8 inc       u64  the proposer's incarnation
 *   16 tag       u64  the proposer's request
 *   24 sec       i64  the proposer's clock: the change's ctime/mtime
 *   32 nsec      u32
 *   36 ...       the kind's fields, in the order of encode_body()
 *
 * PROTECT: ino u64, gseal u64 (the SEAL's log index), holders u64 (a bit
 * per node that acknowledged a whole copy); flags: the copies (R).
 * PERSIST: as PROTECT (holders 0): that seal is in the shared persist dir.
 * LOST: nothing more; the proposer (node, inc) is a daemon that started
 * with empty memory, or (flags NSOP_LOST_STOP) one that stops and takes
 * its memory with it.
 *
 * Strings are u16 length + bytes (no NUL).  A record that does not decode
 * exactly (a length past the end, bytes left over, a name with '/' or NUL,
 * "." or "..", an unknown kind or version) is refused with -EPROTO: every
 * node refuses the same bytes alike.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "rft_le.h"

#define NSOP_HDR_LEN 36

const char *nsop_kind_name(enum nsop_kind k)
{
	switch (k) {
	case NSOP_MKNOD:
		return "mknod";
	case NSOP_MKDIR:
		return "mkdir";
	case NSOP_SYMLINK:
		return "symlink";
	case NSOP_CREATE:
		return "create";
	case NSOP_LINK:
		return "link";
	case NSOP_UNLINK:
		return "unlink";
	case NSOP_RMDIR:
		return "rmdir";
	case NSOP_RENAME:
		return "rename";
	case NSOP_SETATTR:
		return "setattr";
	case NSOP_OPEN:
		return "open";
	case NSOP_SEAL:
		return "seal";
	case NSOP_PROTECT:
		return "protect";
	case NSOP_LOST:
		return "lost";
	case NSOP_PERSIST:
		return "persist";
	}
	return "unknown";
}

void nsop_init(struct nsop *op, enum nsop_kind kind)
{
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->node = -1;
	eng_now(&op->now);
}

void nsop_clear(struct nsop *op)
{
	free(op->target);
	free(op->pieces);
	op->target = NULL;
	op->pieces = NULL;
	op->npieces = 0;
}

/* --- writing ------------------------------------------------------------ */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

static void w_bytes(struct wbuf *w, const void *src, size_t n)
{
	if (w->oom)
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		uint8_t *p;

		while (cap < w->len + n)
			cap *= 2;
		p = realloc(w->p, cap);
		if (!p) {
			w->oom = true;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	/* An empty string may come as NULL: nothing to copy. */
	if (n)
		memcpy(w->p + w->len, src, n);
	w->len += n;
}

static void w_u8(struct wbuf *w, uint8_t v)
{
	w_bytes(w, &v, 1);
}

static void w_u16(struct wbuf *w, uint16_t v)
{
	uint8_t b[2];

	rft_put_le16(b, v);
	w_bytes(w, b, 2);
}

static void w_u32(struct wbuf *w, uint32_t v)
{
	uint8_t b[4];

	rft_put_le32(b, v);
	w_bytes(w, b, 4);
}

static void w_u64(struct wbuf *w, uint64_t v)
{
	uint8_t b[8];

	rft_put_le64(b, v);
	w_bytes(w, b, 8);
}

static void w_str(struct wbuf *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	w_u16(w, (uint16_t)n);
	w_bytes(w, s, n);
}

static void w_time(struct wbuf *w, const struct timespec *ts)
{
	w_u64(w, (uint64_t)ts->tv_sec);
	w_u32(w, (uint32_t)ts->tv_nsec);
}

static void encode_body(struct wbuf *w, const struct nsop *op)
{
	switch (op->kind) {
	case NSOP_MKNOD:
	case NSOP_MKDIR:
	case NSOP_SYMLINK:
	case NSOP_CREATE:
		w_u64(w, op->parent);
		w_str(w, op->name);
		w_u32(w, (uint32_t)op->mode);
		w_u32(w, (uint32_t)op->uid);
		w_u32(w, (uint32_t)op->gid);
		w_u64(w, (uint64_t)op->rdev);
		w_u64(w, op->file_id);
		w_str(w, op->kind == NSOP_SYMLINK ? op->target : NULL);
		break;
	case NSOP_LINK:
		w_u64(w, op->ino);
		w_u64(w, op->newparent);
		w_str(w, op->newname);
		break;
	case NSOP_UNLINK:
	case NSOP_RMDIR:
		w_u64(w, op->parent);
		w_str(w, op->name);
		break;
	case NSOP_RENAME:
		w_u64(w, op->parent);
		w_str(w, op->name);
		w_u64(w, op->newparent);
		w_str(w, op->newname);
		break;
	case NSOP_SETATTR:
		w_u64(w, op->ino);
		w_u32(w, (uint32_t)op->sa.mode);
		w_u32(w, (uint32_t)op->sa.uid);
		w_u32(w, (uint32_t)op->sa.gid);
		w_u64(w, op->sa.size);
		w_time(w, &op->sa.atime);
		w_time(w, &op->sa.mtime);
		w_time(w, &op->sa.ctime);
		w_u32(w, (uint32_t)op->sa.kill_gid);
		break;
	case NSOP_OPEN:
		w_u64(w, op->ino);
		break;
	case NSOP_LOST:
		break;
	case NSOP_PROTECT:
	case NSOP_PERSIST:
		w_u64(w, op->ino);
		w_u64(w, op->gseal);
		w_u64(w, op->holders);
		break;
	case NSOP_SEAL:
		w_u64(w, op->ino);
		w_u64(w, op->version);
		w_u64(w, op->size);
		w_time(w, &op->mtime);
		w_u32(w, op->chunk_size);
		w_u32(w, op->npieces);
		for (uint32_t i = 0; i < op->npieces; i++) {
			w_u32(w, op->pieces[i].crc);
			w_u8(w, op->pieces[i].hole);
		}
		break;
	}
}

int nsop_encode(const struct nsop *op, void **buf, size_t *len)
{
	struct wbuf w = { 0 };

	w_u8(&w, NSOP_VERSION);
	w_u8(&w, (uint8_t)op->kind);
	w_u16(&w, op->node < 0 ? 0xffff : (uint16_t)op->node);
	w_u32(&w, op->flags);
	w_u64(&w, op->inc);
	w_u64(&w, op->tag);
	w_time(&w, &op->now);
	encode_body(&w, op);
	if (w.oom) {
		free(w.p);
		return -ENOMEM;
	}
	*buf = w.p;
	*len = w.len;
	return 0;
}

/* --- reading ------------------------------------------------------------ */

struct rbuf {
	const uint8_t *p;
	size_t len, off;
	bool bad;
};

static const uint8_t *r_take(struct rbuf *r, size_t n)
{
	const uint8_t *p;

	if (r->bad || n > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	p = r->p + r->off;
	r->off += n;
	return p;
}

static uint8_t r_u8(struct rbuf *r)
{
	const uint8_t *p = r_take(r, 1);

	return p ? p[0] : 0;
}

static uint16_t r_u16(struct rbuf *r)
{
	const uint8_t *p = r_take(r, 2);

	return p ? rft_get_le16(p) : 0;
}

static uint32_t r_u32(struct rbuf *r)
{
	const uint8_t *p = r_take(r, 4);

	return p ? rft_get_le32(p) : 0;
}

static uint64_t r_u64(struct rbuf *r)
{
	const uint8_t *p = r_take(r, 8);

	return p ? rft_get_le64(p) : 0;
}

static void r_time(struct rbuf *r, struct timespec *ts)
{
	ts->tv_sec = (time_t)r_u64(r);
	ts->tv_nsec = (long)r_u32(r);
	if (ts->tv_nsec >= 1000000000L)
		r->bad = true;
}

/* A name of one path component: 1..NAME_MAX bytes, no '/' or NUL. */
static void r_name(struct rbuf *r, char out[NAME_MAX + 1])
{
	uint16_t n = r_u16(r);
	const uint8_t *p = r_take(r, n);

	out[0] = '\0';
	if (!p)
		return;
	if (n == 0 || n > NAME_MAX || memchr(p, '/', n) || memchr(p, 0, n) ||
	    (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
		r->bad = true;
		return;
	}
	memcpy(out, p, n);
	out[n] = '\0';
}

/* A symlink target: 1..PATH_MAX - 1 bytes, no NUL; malloc()ed. */
static char *r_target(struct rbuf *r, bool want)
{
	uint16_t n = r_u16(r);
	const uint8_t *p = r_take(r, n);
	char *s;

	if (!p)
		return NULL;
	if (!want) {
		if (n)
			r->bad = true;
		return NULL;
	}
	if (n == 0 || n >= PATH_MAX || memchr(p, 0, n)) {
		r->bad = true;
		return NULL;
	}
	s = malloc((size_t)n + 1);
	if (!s) {
		r->bad = true;
		return NULL;
	}
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

static int decode_seal(struct rbuf *r, struct nsop *op)
{
	uint64_t want;

	op->ino = r_u64(r);
	op->version = r_u64(r);
	op->size = r_u64(r);
	r_time(r, &op->mtime);
	op->chunk_size = r_u32(r);
	op->npieces = r_u32(r);
	if (r->bad)
		return -EPROTO;
	if (op->size > RFT_MAX_FILE_SIZE || op->chunk_size < RFT_CHUNK_MIN ||
	    op->chunk_size > RFT_CHUNK_MAX ||
	    (op->chunk_size & (op->chunk_size - 1)))
		return -EPROTO;
	want = (op->size + op->chunk_size - 1) / op->chunk_size;
	if (op->npieces != want || (size_t)op->npieces * 5 > r->len - r->off)
		return -EPROTO;
	op->pieces = calloc(op->npieces ? op->npieces : 1,
			    sizeof(*op->pieces));
	if (!op->pieces)
		return -ENOMEM;
	for (uint32_t i = 0; i < op->npieces; i++) {
		op->pieces[i].crc = r_u32(r);
		op->pieces[i].hole = r_u8(r);
		if (op->pieces[i].hole > 1)
			r->bad = true;
	}
	return 0;
}

int nsop_decode(const void *buf, size_t len, struct nsop *op)
{
	struct rbuf r = { buf, len, 0, false };
	uint16_t node;
	int rc = 0;

	memset(op, 0, sizeof(*op));
	if (r_u8(&r) != NSOP_VERSION)
		return -EPROTO;
	op->kind = (enum nsop_kind)r_u8(&r);
	node = r_u16(&r);
	op->node = node == 0xffff ? -1 : node;
	op->flags = r_u32(&r);
	op->inc = r_u64(&r);
	op->tag = r_u64(&r);
	r_time(&r, &op->now);
	switch (op->kind) {
	case NSOP_MKNOD:
	case NSOP_MKDIR:
	case NSOP_SYMLINK:
	case NSOP_CREATE:
		op->parent = r_u64(&r);
		r_name(&r, op->name);
		op->mode = (mode_t)r_u32(&r);
		op->uid = (uid_t)r_u32(&r);
		op->gid = (gid_t)r_u32(&r);
		op->rdev = (dev_t)r_u64(&r);
		op->file_id = r_u64(&r);
		op->target = r_target(&r, op->kind == NSOP_SYMLINK);
		break;
	case NSOP_LINK:
		op->ino = r_u64(&r);
		op->newparent = r_u64(&r);
		r_name(&r, op->newname);
		break;
	case NSOP_UNLINK:
	case NSOP_RMDIR:
		op->parent = r_u64(&r);
		r_name(&r, op->name);
		break;
	case NSOP_RENAME:
		op->parent = r_u64(&r);
		r_name(&r, op->name);
		op->newparent = r_u64(&r);
		r_name(&r, op->newname);
		break;
	case NSOP_SETATTR:
		op->ino = r_u64(&r);
		op->sa.valid = op->flags;
		op->sa.mode = (mode_t)r_u32(&r);
		op->sa.uid = (uid_t)r_u32(&r);
		op->sa.gid = (gid_t)r_u32(&r);
		op->sa.size = r_u64(&r);
		r_time(&r, &op->sa.atime);
		r_time(&r, &op->sa.mtime);
		r_time(&r, &op->sa.ctime);
		op->sa.kill_gid = (gid_t)r_u32(&r);
		break;
	case NSOP_OPEN:
		op->ino = r_u64(&r);
		break;
	case NSOP_SEAL:
		rc = decode_seal(&r, op);
		break;
	case NSOP_LOST:
		if (op->node < 0)
			r.bad = true;
		break;
	case NSOP_PROTECT:
	case NSOP_PERSIST:
		op->ino = r_u64(&r);
		op->gseal = r_u64(&r);
		op->holders = r_u64(&r);
		break;
	default:
		r.bad = true;
	}
	if (rc == 0 && (r.bad || r.off != r.len))
		rc = -EPROTO;
	if (rc < 0)
		nsop_clear(op);
	return rc;
}
