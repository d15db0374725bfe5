/*
 * ctl.c - the control socket: how reftfs-admin sees into reftfsd.
 *
 * One request line per connection, answered by tagged lines, then closed
 * (docs/protocol.md, "Control socket").  The daemon renders every answer,
 * human text, JSON or Prometheus, so the client needs no parser and an old
 * client keeps working when fields are added.
 *
 * Answers are built in memory and sent after the engine calls return:
 * engine callbacks run under engine locks, and a client that stops reading
 * must never keep one held.  Only "flush --wait" streams, between calls.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#ifndef RFT_VERSION
#define RFT_VERSION "unknown"
#endif

#define CTL_IO_MS 10000	      /* wait for the request; each blocked send */
#define CTL_POLL_MS 100	      /* flush --wait: progress poll period */
#define CTL_BEAT_MS 1000      /* flush --wait: a record at least this often */
#define CTL_BACKOFF_MS 100    /* accept() failing for lack of resources */
#define CTL_BUSY_MS 2000      /* all slots taken: wait this long for one */
#define CTL_GRACE_MS 500      /* ctl_free: let clients finish their lines */
#define CTL_MAX_ARGS 16	      /* words in a request, command included */
#define CTL_MAX_OUT (64u << 20) /* one buffered answer */

/* Exit codes carried by the final "x" line; docs/protocol.md. */
enum {
	CTL_GONE = -1, /* the client went away: send nothing more */
	CTL_EXIT_OK = 0,
	CTL_EXIT_FAIL = 1,  /* the command ran and failed */
	CTL_EXIT_USAGE = 2, /* unknown command, bad arguments, bad request */
};

enum slot_state { SLOT_FREE, SLOT_RUNNING, SLOT_DONE };

struct ctl_slot {
	struct rfs_ctl *c;
	pthread_t thread;	/* valid unless SLOT_FREE */
	int fd;			/* -1 once the thread closed it; c->lock */
	enum slot_state state;	/* protected by c->lock */
};

struct rfs_ctl {
	struct eng *e;
	char *path;
	int lfd;
	int wakefd;		/* eventfd, readable once rfs_ctl_free() starts */
	dev_t sock_dev;		/* the node we bound: unlink only that one */
	ino_t sock_ino;
	bool started;
	pthread_t acceptor;
	pthread_mutex_t lock;
	pthread_cond_t slot_done;		/* a client thread finished */
	bool stopping;				/* protected by lock */
	struct ctl_slot slots[RFS_CTL_MAX_CLIENTS]; /* protected by lock */
};

/* --- output buffer ------------------------------------------------------ */

/*
 * An answer being built: tagged lines, each ended by ob_end().  Only
 * ob_end() writes '\n'; everything else is escaped or has its newlines
 * turned into blanks, so no data can break the framing.
 */
struct obuf {
	char *buf;
	size_t len, cap;
	int err; /* -ENOMEM or -EFBIG once anything was lost */
};

static int ob_reserve(struct obuf *o, size_t n)
{
	size_t cap;
	char *p;

	if (o->err)
		return o->err;
	if (n <= o->cap - o->len)
		return 0;
	if (n > CTL_MAX_OUT - o->len) {
		o->err = -EFBIG;
		return o->err;
	}
	cap = o->cap ? o->cap : 4096;
	while (cap - o->len < n)
		cap *= 2;
	p = realloc(o->buf, cap);
	if (!p) {
		o->err = -ENOMEM;
		return o->err;
	}
	o->buf = p;
	o->cap = cap;
	return 0;
}

static void ob_add(struct obuf *o, const void *p, size_t n)
{
	if (ob_reserve(o, n))
		return;
	memcpy(o->buf + o->len, p, n);
	o->len += n;
}

static void ob_str(struct obuf *o, const char *s)
{
	ob_add(o, s, strlen(s));
}

__attribute__((format(printf, 2, 0))) static void
ob_vprintf(struct obuf *o, const char *fmt, va_list ap)
{
	va_list aq;
	char *p, *end;
	int n;

	if (o->err)
		return;
	va_copy(aq, ap);
	n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0) {
		o->err = -EINVAL;
		return;
	}
	if (ob_reserve(o, (size_t)n + 1))
		return;
	vsnprintf(o->buf + o->len, (size_t)n + 1, fmt, ap);
	end = o->buf + o->len + n;
	for (p = o->buf + o->len; (p = memchr(p, '\n', end - p)); p++)
		*p = ' ';
	o->len += n;
}

__attribute__((format(printf, 2, 3))) static void
ob_printf(struct obuf *o, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ob_vprintf(o, fmt, ap);
	va_end(ap);
}

static void ob_begin(struct obuf *o, char tag)
{
	char t[2] = { tag, ' ' };

	ob_add(o, t, sizeof(t));
}

static void ob_end(struct obuf *o)
{
	ob_add(o, "\n", 1);
}

/* One whole line: @tag, the formatted text, newline. */
__attribute__((format(printf, 3, 4))) static void
ob_line(struct obuf *o, char tag, const char *fmt, ...)
{
	va_list ap;

	ob_begin(o, tag);
	va_start(ap, fmt);
	ob_vprintf(o, fmt, ap);
	va_end(ap);
	ob_end(o);
}

/* --- escaping ----------------------------------------------------------- */

/* Length (1-4) of the valid UTF-8 sequence at @p and its code point, or 0. */
static int utf8_seq(const unsigned char *p, uint32_t *cpp)
{
	uint32_t cp;
	int n, i;

	if (p[0] < 0x80) {
		*cpp = p[0];
		return 1;
	}
	if (p[0] < 0xc2)
		return 0; /* continuation byte or overlong lead */
	if (p[0] < 0xe0) {
		n = 2;
		cp = p[0] & 0x1f;
	} else if (p[0] < 0xf0) {
		n = 3;
		cp = p[0] & 0x0f;
	} else if (p[0] < 0xf5) {
		n = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	/* A NUL ends the string before any missing continuation byte. */
	for (i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	*cpp = cp;
	return n;
}

/* U+2028 and U+2029 end a line for some readers (Python's splitlines). */
static bool is_line_sep(uint32_t cp)
{
	return cp == 0x2028 || cp == 0x2029;
}

/*
 * @s for a human: backslash, control characters (C0, DEL, C1), line
 * separators and bytes that are not UTF-8 as C escapes, so that a file
 * name can break neither a line nor the terminal.
 */
static void ob_text(struct obuf *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	uint32_t cp = 0; /* utf8_seq() leaves it unset for bad bytes */
	int n, i;

	while (*p) {
		n = utf8_seq(p, &cp);
		if ((n == 1 && cp >= 0x20 && cp != 0x7f && cp != '\\') ||
		    (n > 1 && cp >= 0xa0 && !is_line_sep(cp))) {
			ob_add(o, p, n);
			p += n;
			continue;
		}
		if (n == 1 && cp == '\\')
			ob_str(o, "\\\\");
		else if (n == 1 && cp == '\n')
			ob_str(o, "\\n");
		else if (n == 1 && cp == '\t')
			ob_str(o, "\\t");
		else if (n == 1 && cp == '\r')
			ob_str(o, "\\r");
		else if (is_line_sep(cp))
			ob_printf(o, "\\u%04x", (unsigned)cp);
		else
			for (i = 0; i < (n ? n : 1); i++)
				ob_printf(o, "\\x%02x", p[i]);
		p += n ? n : 1;
	}
}

/* Columns @s takes once through ob_text() (a scratch rendering). */
static int text_cols(const char *s)
{
	struct obuf t = { 0 };
	int cols = 0;
	size_t i;

	ob_text(&t, s);
	for (i = 0; i < t.len; i++)
		cols += ((unsigned char)t.buf[i] & 0xc0) != 0x80;
	free(t.buf);
	return cols;
}

static void ob_text_pad(struct obuf *o, const char *s, int width)
{
	int cols = text_cols(s);

	ob_text(o, s);
	while (cols++ < width)
		ob_add(o, " ", 1);
}

/*
 * A JSON string body (no quotes).  JSON cannot carry bytes that are not
 * UTF-8: each becomes U+FFFD (docs/protocol.md says so).
 */
static void ob_json_body(struct obuf *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	uint32_t cp;
	int n;

	while (*p) {
		n = utf8_seq(p, &cp);
		if (!n) {
			ob_str(o, "\\ufffd");
			p++;
			continue;
		}
		if (n > 1) {
			/* C1 controls too: NEL ends a line for some. */
			if (cp < 0xa0 || is_line_sep(cp))
				ob_printf(o, "\\u%04x", (unsigned)cp);
			else
				ob_add(o, p, n);
			p += n;
			continue;
		}
		switch (cp) {
		case '"':
			ob_str(o, "\\\"");
			break;
		case '\\':
			ob_str(o, "\\\\");
			break;
		case '\n':
			ob_str(o, "\\n");
			break;
		case '\r':
			ob_str(o, "\\r");
			break;
		case '\t':
			ob_str(o, "\\t");
			break;
		default:
			if (cp < 0x20 || cp == 0x7f)
				ob_printf(o, "\\u%04x", (unsigned)cp);
			else
				ob_add(o, p, 1);
		}
		p++;
	}
}

static void ob_json(struct obuf *o, const char *s)
{
	ob_add(o, "\"", 1);
	ob_json_body(o, s);
	ob_add(o, "\"", 1);
}

/* A JSON string, or null for NULL and "". */
static void ob_json_opt(struct obuf *o, const char *s)
{
	if (s && *s)
		ob_json(o, s);
	else
		ob_str(o, "null");
}

static void ob_json_bool(struct obuf *o, bool b)
{
	ob_str(o, b ? "true" : "false");
}

/*
 * A Prometheus label value (no quotes).  The format escapes only \\, \"
 * and \n; other control characters, line separators and bytes that are
 * not UTF-8 become U+FFFD so that no reader splits the line.
 */
static void ob_prom_label(struct obuf *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	uint32_t cp;
	int n;

	while (*p) {
		n = utf8_seq(p, &cp);
		if (!n) {
			ob_str(o, "\xef\xbf\xbd");
			p++;
		} else if (n == 1 && cp == '\\') {
			ob_str(o, "\\\\");
			p++;
		} else if (n == 1 && cp == '"') {
			ob_str(o, "\\\"");
			p++;
		} else if (n == 1 && cp == '\n') {
			ob_str(o, "\\n");
			p++;
		} else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0) ||
			   is_line_sep(cp)) {
			ob_str(o, "\xef\xbf\xbd");
			p += n;
		} else {
			ob_add(o, p, n);
			p += n;
		}
	}
}

/* --- human units -------------------------------------------------------- */

static const char *fmt_bytes(char *buf, size_t size, uint64_t v)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB",
					    "PiB", "EiB" };
	double d = (double)v / 1024;
	unsigned u = 0;

	if (v < 1024) {
		snprintf(buf, size, "%" PRIu64 " B", v);
		return buf;
	}
	while (d >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		d /= 1024;
		u++;
	}
	snprintf(buf, size, "%.1f %s", d, unit[u]);
	return buf;
}

static const char *fmt_dur(char *buf, size_t size, uint64_t s)
{
	uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

	s %= 60;
	if (d)
		snprintf(buf, size,
			 "%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m", d, h, m);
	else if (h)
		snprintf(buf, size,
			 "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", h, m, s);
	else if (m)
		snprintf(buf, size, "%" PRIu64 "m %02" PRIu64 "s", m, s);
	else
		snprintf(buf, size, "%" PRIu64 "s", s);
	return buf;
}

static const char *fmt_time(char *buf, size_t size, time_t t)
{
	struct tm tm;

	if (!t || !localtime_r(&t, &tm) ||
	    !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, size, "never");
	return buf;
}

/* "3m 05s ago" for @t, "in the future" if the clock went back. */
static const char *fmt_ago(char *buf, size_t size, time_t t)
{
	time_t now = time(NULL);
	char d[32];

	if (now < t)
		snprintf(buf, size, "in the future");
	else
		snprintf(buf, size, "%s ago",
			 fmt_dur(d, sizeof(d), (uint64_t)(now - t)));
	return buf;
}

static const char *plural(uint64_t n, const char *suffix)
{
	return n == 1 ? "" : suffix;
}

static const char *state_name(enum eng_state s)
{
	const char *n = eng_state_name(s);

	return n ? n : "unknown";
}

static const char *crc_name(enum eng_crc_state s)
{
	const char *n = eng_crc_state_name(s);

	return n ? n : "unknown";
}

static const char *err_name(int err)
{
	return strerror(err < 0 ? -err : err);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* --- collecting checkpoints --------------------------------------------- */

/* A copy of eng_ckpt_info that outlives the callback. */
struct ck {
	char *name;
	uint64_t seq, files, bytes, resident;
	enum eng_state state;
	bool keep, persist;
};

struct cklist {
	struct ck *v;
	size_t n, cap;
	int err;
};

static int ck_add(void *ctx, const struct eng_ckpt_info *ci)
{
	struct cklist *l = ctx;
	struct ck *k;

	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;

		k = realloc(l->v, cap * sizeof(*k));
		if (!k)
			goto nomem;
		l->v = k;
		l->cap = cap;
	}
	k = &l->v[l->n];
	k->name = strdup(ci->name ? ci->name : "");
	if (!k->name)
		goto nomem;
	k->seq = ci->seq;
	k->files = ci->files;
	k->bytes = ci->bytes;
	k->resident = ci->bytes_resident;
	k->state = ci->state;
	k->keep = ci->in_keep_window;
	k->persist = ci->persist_selected;
	l->n++;
	return 0;
nomem:
	l->err = -ENOMEM;
	return 1;
}

static void ck_release(struct cklist *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
}

static int ck_collect(struct eng *e, struct cklist *l)
{
	int rc = eng_list_checkpoints(e, ck_add, l);

	if (l->err)
		return l->err;
	return rc < 0 ? rc : 0;
}

/* --- requests ----------------------------------------------------------- */

#define CMD_JSON (1u << 0) /* takes --json */
#define CMD_WAIT (1u << 1) /* takes --wait */
#define CMD_PATH (1u << 2) /* takes one optional PATH */

struct ctl_req;

struct ctl_cmd {
	const char *name;
	unsigned opts;	   /* CMD_* */
	const char *usage; /* its arguments */
	const char *help;
	/* Renders into @o; returns an exit code or CTL_GONE. */
	int (*fn)(struct ctl_req *r, struct obuf *o);
};

struct ctl_req {
	struct rfs_ctl *c;
	int fd;
	bool eof; /* the client shut its side: stop polling it for input */
	const struct ctl_cmd *cmd;
	bool json, wait;
	const char *path; /* ls: NULL for the root */
};

static int send_all(int fd, const char *p, size_t n)
{
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Send what @o holds now and empty it (flush --wait streams this way). */
static int ob_send(struct ctl_req *r, struct obuf *o)
{
	int rc;

	if (o->err)
		return o->err;
	rc = send_all(r->fd, o->buf, o->len);
	o->len = 0;
	return rc;
}

/*
 * Sleep up to @ms watching the client and rfs_ctl_free().  Returns 0, or
 * -ESHUTDOWN when the server stops, -EPIPE when the client is gone.
 */
static int ctl_nap(struct ctl_req *r, int ms)
{
	struct pollfd pfd[2] = {
		{ .fd = r->c->wakefd, .events = POLLIN },
		{ .fd = r->eof ? -1 : r->fd, .events = POLLIN },
	};
	char junk[256];
	ssize_t n;

	if (poll(pfd, 2, ms) < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[0].revents)
		return -ESHUTDOWN;
	if (pfd[1].revents & (POLLHUP | POLLERR | POLLNVAL))
		return -EPIPE;
	if (!(pfd[1].revents & POLLIN))
		return 0;
	/*
	 * EOF may be a half-close by a client still reading (socat does
	 * that): stop watching; a closed client shows on the next send.
	 */
	n = recv(r->fd, junk, sizeof(junk), MSG_DONTWAIT);
	if (n == 0)
		r->eof = true;
	else if (n < 0 && errno != EAGAIN && errno != EINTR)
		return -EPIPE;
	return 0;
}

/*
 * Read one request line into @buf (RFS_CTL_MAX_LINE + 1 bytes), NUL-terminated
 * without its '\n' (or '\r\n').  EOF also ends a line.  Returns 0,
 * -ENODATA (closed before saying anything), -ETIMEDOUT, -E2BIG, -EINVAL
 * (NUL byte), -ESHUTDOWN or another -errno.
 */
static int ctl_read_request(struct rfs_ctl *c, int fd, char *buf)
{
	uint64_t deadline = mono_ms() + CTL_IO_MS;
	size_t len = 0;
	char *nl;

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = fd, .events = POLLIN },
			{ .fd = c->wakefd, .events = POLLIN },
		};
		uint64_t now = mono_ms();
		ssize_t n;

		if (now >= deadline)
			return -ETIMEDOUT;
		if (poll(pfd, 2, (int)(deadline - now)) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pfd[1].revents)
			return -ESHUTDOWN;
		if (!pfd[0].revents)
			continue;
		n = recv(fd, buf + len, RFS_CTL_MAX_LINE - len, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (n == 0) {
			if (!len)
				return -ENODATA;
			break;
		}
		nl = memchr(buf + len, '\n', (size_t)n);
		len += (size_t)n;
		if (nl) {
			len = (size_t)(nl - buf);
			break;
		}
		if (len == RFS_CTL_MAX_LINE)
			return -E2BIG;
	}
	if (memchr(buf, '\0', len))
		return -EINVAL;
	if (len && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	return 0;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * Split @line in place into at most @max words.  Blanks separate words; a
 * word in double quotes may hold blanks, and in it \\ \" \n \t and \xHH
 * (not \x00) stand for one byte.  Control characters are refused.
 * Returns the word count, or -EINVAL / -E2BIG with @why set.
 */
static int split_words(char *line, char **argv, int max, const char **why)
{
	char *p = line, *w;
	int argc = 0, hi, lo;
	unsigned char ch;

	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			return argc;
		if (argc == max) {
			*why = "too many words";
			return -E2BIG;
		}
		argv[argc++] = w = p;
		if (*p != '"') {
			for (; *p && *p != ' ' && *p != '\t'; p++) {
				ch = (unsigned char)*p;
				if (ch < 0x20 || ch == 0x7f)
					goto ctrl;
			}
			if (*p)
				*p++ = '\0';
			continue;
		}
		for (p++; *p != '"'; p++) {
			ch = (unsigned char)*p;
			if (!ch) {
				*why = "unterminated quote";
				return -EINVAL;
			}
			if (ch < 0x20 || ch == 0x7f)
				goto ctrl;
			if (ch == '\\') {
				switch (*++p) {
				case '\\':
				case '"':
					ch = (unsigned char)*p;
					break;
				case 'n':
					ch = '\n';
					break;
				case 't':
					ch = '\t';
					break;
				case 'x':
					hi = hexval(p[1]);
					lo = hi < 0 ? -1 : hexval(p[2]);
					if (lo < 0 || (!hi && !lo))
						goto esc;
					ch = (unsigned char)(hi << 4 | lo);
					p += 2;
					break;
				default:
					goto esc;
				}
			}
			*w++ = (char)ch;
		}
		p++; /* the closing quote; w is behind it */
		if (*p && *p != ' ' && *p != '\t') {
			*why = "text right after a closing quote";
			return -EINVAL;
		}
		*w = '\0';
	}
ctrl:
	*why = "control character (quote it as \\n, \\t or \\xHH)";
	return -EINVAL;
esc:
	*why = "bad escape in quotes (use \\\\ \\\" \\n \\t \\xHH)";
	return -EINVAL;
}

/*
 * @in (absolute or relative to the mount root) as the engine wants it:
 * no leading or doubled '/', "." dropped, ".." applied (never above the
 * root), "" for the root.  @out holds @size bytes.
 */
static int norm_path(const char *in, char *out, size_t size)
{
	const char *p = in, *s;
	size_t len = 0, n;

	while (*p) {
		while (*p == '/')
			p++;
		for (s = p; *p && *p != '/'; p++)
			;
		n = (size_t)(p - s);
		if (!n || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			while (len && out[len - 1] != '/')
				len--;
			if (len)
				len--;
			continue;
		}
		if (len + 1 + n + 1 > size)
			return -ENAMETOOLONG;
		if (len)
			out[len++] = '/';
		memcpy(out + len, s, n);
		len += n;
	}
	out[len] = '\0';
	return 0;
}

/* --- status ------------------------------------------------------------- */

#define LBL "%-14s" /* label column of the status text */

static void status_text(struct ctl_req *r, struct obuf *o,
			const struct eng_stats *st, const struct cklist *cl)
{
	const struct eng_config *cfg = eng_get_config(r->c->e);
	char b1[32], b2[32], t1[64], t2[64];
	time_t now = time(NULL);
	uint64_t up = now > st->start_time ? (uint64_t)(now - st->start_time)
					    : 0;
	int w = 10;
	size_t i;

	ob_begin(o, 'o');
	ob_printf(o, LBL, "mount");
	ob_text(o, cfg->mountpoint ? cfg->mountpoint : "(unknown)");
	ob_end(o);
	ob_line(o, 'o', LBL "reftfsd %s, pid %d", "daemon", RFT_VERSION,
		(int)getpid());
	ob_begin(o, 'o');
	ob_printf(o, LBL, "socket");
	ob_text(o, r->c->path);
	ob_end(o);
	if (st->start_time)
		ob_line(o, 'o', LBL "%s (since %s)", "uptime",
			fmt_dur(b1, sizeof(b1), up),
			fmt_time(t1, sizeof(t1), st->start_time));
	ob_line(o, 'o', LBL "%s of %s used (%.1f%%)", "memory",
		fmt_bytes(b1, sizeof(b1), st->mem_used),
		fmt_bytes(b2, sizeof(b2), st->mem_budget),
		st->mem_budget ? 100.0 * (double)st->mem_used /
					 (double)st->mem_budget
			       : 0.0);
	/* Until the arena is faulted in, first writes run slower. */
	if (st->mem_prefaulted < st->mem_budget)
		ob_line(o, 'o', LBL "%s of the budget faulted in ahead of use",
			"", fmt_bytes(b1, sizeof(b1), st->mem_prefaulted));
	ob_line(o, 'o',
		LBL "%s each; %" PRIu64 " of %" PRIu64 " in use, %" PRIu64
		    " evictable",
		"chunks", fmt_bytes(b1, sizeof(b1), st->chunk_size),
		st->chunks_used, st->chunks_total, st->chunks_evictable);
	ob_line(o, 'o',
		LBL "%" PRIu64 " checkpoint%s, %" PRIu64 " file%s, %" PRIu64
		    " director%s",
		"contents", st->checkpoints, plural(st->checkpoints, "s"),
		st->files, plural(st->files, "s"), st->dirs,
		st->dirs == 1 ? "y" : "ies");
	ob_line(o, 'o', LBL "%s logical, %s resident in RAM", "data",
		fmt_bytes(b1, sizeof(b1), st->bytes_logical),
		fmt_bytes(b2, sizeof(b2), st->bytes_resident));
	ob_line(o, 'o',
		LBL "%" PRIu64 " writes (%s), %" PRIu64 " reads (%s)", "io",
		st->write_ops, fmt_bytes(b1, sizeof(b1), st->write_bytes),
		st->read_ops, fmt_bytes(b2, sizeof(b2), st->read_bytes));

	if (!st->persist_enabled) {
		ob_line(o, 'o', LBL "disabled (no --persist directory)",
			"persist");
	} else {
		ob_begin(o, 'o');
		ob_printf(o, LBL, "persist");
		ob_text(o, cfg->persist_dir ? cfg->persist_dir : "enabled");
		ob_printf(o, ", %s",
			  st->persist_healthy ? "healthy" : "FAILING");
		ob_end(o);
		ob_line(o, 'o',
			LBL "%" PRIu64 " files (%s) written, %" PRIu64
			    " files (%s) pending, %" PRIu64 " errors",
			"", st->persist_files,
			fmt_bytes(b1, sizeof(b1), st->persist_bytes),
			st->persist_pending_files,
			fmt_bytes(b2, sizeof(b2), st->persist_pending_bytes),
			st->persist_errors);
		if (cfg->persist_every)
			ob_line(o, 'o',
				LBL "policy --persist-every %u, --keep %u", "",
				cfg->persist_every, cfg->keep);
		else
			ob_line(o, 'o',
				LBL "policy write back on flush and unmount "
				    "only, --keep %u",
				"", cfg->keep);
		if (st->persist_last_ok_time)
			ob_line(o, 'o', LBL "last success %s (%s)", "",
				fmt_time(t1, sizeof(t1),
					 st->persist_last_ok_time),
				fmt_ago(t2, sizeof(t2),
					st->persist_last_ok_time));
		if (st->persist_last_error[0]) {
			ob_begin(o, 'o');
			ob_printf(o, LBL "last error %s (%s): ", "",
				  fmt_time(t1, sizeof(t1),
					   st->persist_last_error_time),
				  fmt_ago(t2, sizeof(t2),
					  st->persist_last_error_time));
			ob_text(o, st->persist_last_error);
			ob_end(o);
		}
	}
	ob_line(o, 'o',
		LBL "enospc %" PRIu64 ", crc errors %" PRIu64
		    ", evicted chunks %" PRIu64 ", read-through %" PRIu64
		    " chunks (%s)",
		"counters", st->enospc, st->crc_errors, st->evicted_chunks,
		st->readthrough_chunks,
		fmt_bytes(b1, sizeof(b1), st->readthrough_bytes));

	ob_line(o, 'o', "%s", "");
	if (!cl->n) {
		ob_line(o, 'o', "no checkpoints");
		return;
	}
	for (i = 0; i < cl->n; i++) {
		int cols = text_cols(cl->v[i].name);

		if (cols > w)
			w = cols > 40 ? 40 : cols;
	}
	ob_line(o, 'o', "%-*s %6s  %-9s  %8s  %10s  %10s  %s", w,
		"CHECKPOINT", "SEQ", "STATE", "FILES", "BYTES", "RESIDENT",
		"FLAGS");
	for (i = 0; i < cl->n; i++) {
		const struct ck *k = &cl->v[i];

		ob_begin(o, 'o');
		ob_text_pad(o, k->name, w);
		ob_printf(o,
			  " %6" PRIu64 "  %-9s  %8" PRIu64 "  %10s  %10s  %s",
			  k->seq, state_name(k->state), k->files,
			  fmt_bytes(b1, sizeof(b1), k->bytes),
			  fmt_bytes(b2, sizeof(b2), k->resident),
			  k->keep && k->persist ? "keep,persist"
			  : k->keep		? "keep"
			  : k->persist		? "persist"
						: "-");
		ob_end(o);
	}
}

static void status_json(struct ctl_req *r, struct obuf *o,
			const struct eng_stats *st, const struct cklist *cl)
{
	const struct eng_config *cfg = eng_get_config(r->c->e);
	time_t now = time(NULL);
	size_t i;

	ob_begin(o, 'o');
	ob_str(o, "{\"mountpoint\":");
	ob_json_opt(o, cfg->mountpoint);
	ob_str(o, ",\"socket\":");
	ob_json(o, r->c->path);
	ob_str(o, ",\"version\":");
	ob_json(o, RFT_VERSION);
	ob_printf(o,
		  ",\"protocol\":%d,\"pid\":%d,\"start_time\":%lld"
		  ",\"uptime_seconds\":%lld",
		  RFS_CTL_PROTOCOL, (int)getpid(), (long long)st->start_time,
		  (long long)(now > st->start_time ? now - st->start_time : 0));
	ob_printf(o,
		  ",\"memory\":{\"budget_bytes\":%" PRIu64
		  ",\"used_bytes\":%" PRIu64 ",\"prefaulted_bytes\":%" PRIu64
		  ",\"used_percent\":%.1f"
		  ",\"chunk_size_bytes\":%" PRIu64 ",\"chunks_total\":%" PRIu64
		  ",\"chunks_used\":%" PRIu64 ",\"chunks_evictable\":%" PRIu64
		  "}",
		  st->mem_budget, st->mem_used, st->mem_prefaulted,
		  st->mem_budget ? 100.0 * (double)st->mem_used /
					   (double)st->mem_budget
				 : 0.0,
		  st->chunk_size, st->chunks_total, st->chunks_used,
		  st->chunks_evictable);
	ob_printf(o,
		  ",\"namespace\":{\"checkpoints\":%" PRIu64
		  ",\"files\":%" PRIu64 ",\"dirs\":%" PRIu64
		  ",\"logical_bytes\":%" PRIu64 ",\"resident_bytes\":%" PRIu64
		  "}",
		  st->checkpoints, st->files, st->dirs, st->bytes_logical,
		  st->bytes_resident);
	ob_printf(o,
		  ",\"io\":{\"write_ops\":%" PRIu64 ",\"write_bytes\":%" PRIu64
		  ",\"read_ops\":%" PRIu64 ",\"read_bytes\":%" PRIu64 "}",
		  st->write_ops, st->write_bytes, st->read_ops,
		  st->read_bytes);
	ob_printf(o,
		  ",\"counters\":{\"enospc\":%" PRIu64
		  ",\"crc_errors\":%" PRIu64 ",\"evicted_chunks\":%" PRIu64
		  ",\"readthrough_chunks\":%" PRIu64
		  ",\"readthrough_bytes\":%" PRIu64 "}",
		  st->enospc, st->crc_errors, st->evicted_chunks,
		  st->readthrough_chunks, st->readthrough_bytes);
	ob_str(o, ",\"persist\":{\"enabled\":");
	ob_json_bool(o, st->persist_enabled);
	ob_str(o, ",\"dir\":");
	ob_json_opt(o, st->persist_enabled ? cfg->persist_dir : NULL);
	ob_str(o, ",\"healthy\":");
	ob_json_bool(o, st->persist_healthy);
	ob_printf(o,
		  ",\"written_files\":%" PRIu64 ",\"written_bytes\":%" PRIu64
		  ",\"errors\":%" PRIu64 ",\"pending_files\":%" PRIu64
		  ",\"pending_bytes\":%" PRIu64,
		  st->persist_files, st->persist_bytes, st->persist_errors,
		  st->persist_pending_files, st->persist_pending_bytes);
	ob_str(o, ",\"last_error\":");
	ob_json_opt(o, st->persist_last_error);
	if (st->persist_last_error_time)
		ob_printf(o, ",\"last_error_time\":%lld",
			  (long long)st->persist_last_error_time);
	else
		ob_str(o, ",\"last_error_time\":null");
	if (st->persist_last_ok_time)
		ob_printf(o, ",\"last_ok_time\":%lld",
			  (long long)st->persist_last_ok_time);
	else
		ob_str(o, ",\"last_ok_time\":null");
	ob_printf(o, ",\"keep\":%u,\"persist_every\":%u}", cfg->keep,
		  cfg->persist_every);
	ob_str(o, ",\"checkpoints\":[");
	for (i = 0; i < cl->n; i++) {
		const struct ck *k = &cl->v[i];

		ob_str(o, i ? ",{\"name\":" : "{\"name\":");
		ob_json(o, k->name);
		ob_printf(o,
			  ",\"seq\":%" PRIu64
			  ",\"state\":\"%s\",\"files\":%" PRIu64
			  ",\"bytes\":%" PRIu64 ",\"resident_bytes\":%" PRIu64
			  ",\"keep\":%s,\"persist_selected\":%s}",
			  k->seq, state_name(k->state), k->files, k->bytes,
			  k->resident, k->keep ? "true" : "false",
			  k->persist ? "true" : "false");
	}
	ob_str(o, "]}");
	ob_end(o);
}

static int cmd_status(struct ctl_req *r, struct obuf *o)
{
	struct eng_stats st;
	struct cklist cl = { 0 };
	int rc;

	memset(&st, 0, sizeof(st));
	eng_get_stats(r->c->e, &st);
	st.persist_last_error[sizeof(st.persist_last_error) - 1] = '\0';
	rc = ck_collect(r->c->e, &cl);
	if (rc < 0) {
		ob_line(o, 'e', "status: listing checkpoints: %s",
			err_name(rc));
		ck_release(&cl);
		return CTL_EXIT_FAIL;
	}
	if (r->json)
		status_json(r, o, &st, &cl);
	else
		status_text(r, o, &st, &cl);
	ck_release(&cl);
	return CTL_EXIT_OK;
}

/* --- ls ----------------------------------------------------------------- */

struct ls_ctx {
	struct obuf *o;
	bool json;
	uint64_t n;
};

static const char *type_name(mode_t mode)
{
	if (S_ISREG(mode))
		return "file";
	if (S_ISDIR(mode))
		return "dir";
	if (S_ISLNK(mode))
		return "symlink";
	return "other";
}

static void ls_json(struct obuf *o, const struct eng_entry_info *ei)
{
	ob_str(o, "{\"path\":\"/");
	ob_json_body(o, ei->path);
	ob_printf(o,
		  "\",\"type\":\"%s\",\"ino\":%" PRIu64 ",\"mode\":\"%04o\""
		  ",\"size\":%" PRIu64 ",\"mtime\":%lld,\"mtime_nsec\":%ld",
		  type_name(ei->mode), ei->ino, (unsigned)(ei->mode & 07777),
		  ei->size, (long long)ei->mtime.tv_sec,
		  (long)ei->mtime.tv_nsec);
	if (S_ISREG(ei->mode)) {
		ob_printf(o,
			  ",\"state\":\"%s\",\"checksum\":\"%s\",\"tier\":",
			  state_name(ei->state), crc_name(ei->crc));
		ob_json_opt(o, ei->tier);
		ob_printf(o,
			  ",\"chunks\":%" PRIu32 ",\"chunks_resident\":%" PRIu32
			  ",\"in_persist\":%s}",
			  ei->chunks, ei->chunks_resident,
			  ei->in_persist ? "true" : "false");
	} else {
		ob_str(o, ",\"state\":null,\"checksum\":null,\"tier\":null"
			  ",\"chunks\":null,\"chunks_resident\":null"
			  ",\"in_persist\":null}");
	}
}

#define LS_ROW "%-9s  %13s  %-11s  %-10s  %13s  "

static void ls_text(struct obuf *o, const struct eng_entry_info *ei)
{
	char size[24], chunks[32];

	ob_begin(o, 'o');
	if (S_ISREG(ei->mode)) {
		snprintf(size, sizeof(size), "%" PRIu64, ei->size);
		snprintf(chunks, sizeof(chunks), "%" PRIu32 "/%" PRIu32,
			 ei->chunks_resident, ei->chunks);
		ob_printf(o, LS_ROW, state_name(ei->state), size,
			  ei->tier ? ei->tier : "-", crc_name(ei->crc), chunks);
	} else if (S_ISDIR(ei->mode)) {
		ob_printf(o, LS_ROW, "dir", "-", "-", "-", "-");
	} else {
		snprintf(size, sizeof(size), "%" PRIu64, ei->size);
		ob_printf(o, LS_ROW, type_name(ei->mode), size, "-", "-", "-");
	}
	ob_add(o, "/", 1);
	ob_text(o, ei->path);
	ob_end(o);
}

static int ls_entry(void *ctx, const struct eng_entry_info *ei)
{
	struct ls_ctx *l = ctx;

	if (l->json) {
		if (l->n)
			ob_add(l->o, ",", 1);
		ls_json(l->o, ei);
	} else {
		ls_text(l->o, ei);
	}
	l->n++;
	return l->o->err ? 1 : 0;
}

static int cmd_ls(struct ctl_req *r, struct obuf *o)
{
	const char *mnt = eng_get_config(r->c->e)->mountpoint;
	struct ls_ctx l = { .o = o, .json = r->json };
	char rel[RFS_CTL_MAX_LINE + 1];
	size_t n;
	int rc;

	if (norm_path(r->path ? r->path : "", rel, sizeof(rel)) < 0) {
		ob_line(o, 'e', "ls: path too long");
		return CTL_EXIT_USAGE;
	}
	if (r->json) {
		ob_begin(o, 'o');
		ob_add(o, "[", 1);
	} else {
		ob_line(o, 'o', LS_ROW "%s", "STATE", "SIZE", "TIER",
			"CHECKSUM", "CHUNKS", "PATH");
	}
	rc = eng_list_path(r->c->e, rel, ls_entry, &l);
	if (o->err)
		return CTL_EXIT_FAIL;
	if (rc < 0) {
		o->len = 0;
		ob_begin(o, 'e');
		ob_str(o, "ls: /");
		ob_text(o, rel);
		ob_printf(o, ": %s", err_name(rc));
		ob_end(o);
		/* "ls /mnt/ckpt/step_1" for "ls /step_1": say so. */
		n = mnt ? strlen(mnt) : 0;
		if (rc == -ENOENT && n > 1 && r->path &&
		    !strncmp(r->path, mnt, n) &&
		    (r->path[n] == '/' || !r->path[n])) {
			ob_begin(o, 'e');
			ob_str(o, "paths are relative to the mount root: try "
				  "'ls /");
			if (norm_path(r->path + n, rel, sizeof(rel)) == 0)
				ob_text(o, rel);
			ob_str(o, "'");
			ob_end(o);
		}
		return CTL_EXIT_FAIL;
	}
	if (r->json) {
		ob_add(o, "]", 1);
		ob_end(o);
	}
	return CTL_EXIT_OK;
}

/* --- flush -------------------------------------------------------------- */

static void flush_json(struct obuf *o, uint64_t ticket,
		       const struct eng_flush_progress *p)
{
	ob_begin(o, 'o');
	ob_printf(o,
		  "{\"ticket\":%" PRIu64 ",\"files_done\":%" PRIu64
		  ",\"files_total\":%" PRIu64 ",\"bytes_done\":%" PRIu64
		  ",\"bytes_total\":%" PRIu64 ",\"finished\":%s,\"error\":",
		  ticket, p->files_done, p->files_total, p->bytes_done,
		  p->bytes_total, p->finished ? "true" : "false");
	if (p->error)
		ob_json(o, err_name(p->error));
	else
		ob_str(o, "null");
	ob_str(o, "}");
	ob_end(o);
}

static int flush_wait(struct ctl_req *r, struct obuf *o, uint64_t ticket)
{
	struct eng *e = r->c->e;
	struct eng_flush_progress p, last = { 0 };
	struct eng_stats st;
	uint64_t sent_at = 0;
	char b[32];
	bool sent = false;
	int rc;

	for (;;) {
		memset(&p, 0, sizeof(p));
		rc = eng_flush_progress(e, ticket, &p);
		if (rc < 0) {
			ob_line(o, 'e', "flush: progress of ticket %" PRIu64
				": %s", ticket, err_name(rc));
			return CTL_EXIT_FAIL;
		}
		if (!sent || p.finished || mono_ms() - sent_at >= CTL_BEAT_MS ||
		    p.files_done != last.files_done ||
		    p.files_total != last.files_total ||
		    p.bytes_done != last.bytes_done ||
		    p.bytes_total != last.bytes_total) {
			ob_line(o, 'p',
				"%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
				p.files_done, p.files_total, p.bytes_done,
				p.bytes_total);
			if (ob_send(r, o))
				return CTL_GONE;
			sent = true;
			sent_at = mono_ms();
			last = p;
		}
		if (p.finished)
			break;
		rc = ctl_nap(r, CTL_POLL_MS);
		if (rc == -ESHUTDOWN) {
			ob_line(o, 'e', "flush: reftfsd is stopping; the "
				"write-back goes on without this client");
			return CTL_EXIT_FAIL;
		}
		if (rc < 0)
			return CTL_GONE;
	}
	if (r->json)
		flush_json(o, ticket, &p);
	if (p.error) {
		ob_line(o, 'e', "flush failed: %s", err_name(p.error));
		memset(&st, 0, sizeof(st));
		eng_get_stats(e, &st);
		st.persist_last_error[sizeof(st.persist_last_error) - 1] = 0;
		if (st.persist_last_error[0]) {
			ob_begin(o, 'e');
			ob_str(o, "last persist error: ");
			ob_text(o, st.persist_last_error);
			ob_end(o);
		}
		return CTL_EXIT_FAIL;
	}
	if (!r->json)
		ob_line(o, 'o',
			"flush finished: %" PRIu64 " files, %s written back",
			p.files_done, fmt_bytes(b, sizeof(b), p.bytes_done));
	return CTL_EXIT_OK;
}

static int cmd_flush(struct ctl_req *r, struct obuf *o)
{
	struct eng *e = r->c->e;
	struct eng_flush_progress p;
	struct eng_stats st;
	uint64_t ticket = 0;
	char b[32];
	int rc;

	memset(&st, 0, sizeof(st));
	eng_get_stats(e, &st);
	if (!st.persist_enabled) {
		ob_line(o, 'e', "flush: no persist tier (reftfsd runs "
			"without --persist)");
		return CTL_EXIT_FAIL;
	}
	rc = eng_flush_request(e, &ticket);
	if (rc < 0) {
		ob_line(o, 'e', "flush: %s", err_name(rc));
		return CTL_EXIT_FAIL;
	}
	if (r->wait)
		return flush_wait(r, o, ticket);
	memset(&p, 0, sizeof(p));
	rc = eng_flush_progress(e, ticket, &p);
	if (rc < 0) {
		ob_line(o, 'e', "flush: progress of ticket %" PRIu64 ": %s",
			ticket, err_name(rc));
		return CTL_EXIT_FAIL;
	}
	if (r->json)
		flush_json(o, ticket, &p);
	else
		ob_line(o, 'o',
			"flush requested (ticket %" PRIu64 "): %" PRIu64
			" files, %s to write back",
			ticket, p.files_total,
			fmt_bytes(b, sizeof(b), p.bytes_total));
	return CTL_EXIT_OK;
}

/* --- metrics ------------------------------------------------------------ */

/*
 * Families go out as Prometheus text, or with --json as one object: a
 * family without labels is "name": value, one with labels is "name":
 * [{"labels": {...}, "value": v}, ...].
 */
struct pw {
	struct obuf *o;
	bool json;
	const char *fam;  /* the family being written */
	bool labelled;	  /* it has labels (JSON: an array is open) */
	unsigned nfam, nsamp;
};

static void pw_close(struct pw *w)
{
	if (w->json && w->fam && w->labelled)
		ob_str(w->o, "]");
	w->fam = NULL;
}

static void pw_family(struct pw *w, const char *name, const char *type,
		      const char *help, bool labelled)
{
	pw_close(w);
	w->fam = name;
	w->labelled = labelled;
	w->nsamp = 0;
	if (!w->json) {
		ob_line(w->o, 'o', "# HELP %s %s", name, help);
		ob_line(w->o, 'o', "# TYPE %s %s", name, type);
		return;
	}
	ob_str(w->o, w->nfam++ ? "," : "");
	ob_json(w->o, name);
	ob_str(w->o, labelled ? ":[" : ":");
}

/* The one sample of a family without labels. */
static void pw_value(struct pw *w, uint64_t v)
{
	if (w->json)
		ob_printf(w->o, "%" PRIu64, v);
	else
		ob_line(w->o, 'o', "%s %" PRIu64, w->fam, v);
}

/* A sample with label @k1 = @v1 and, unless @k2 is NULL, @k2 = @v2. */
static void pw_sample(struct pw *w, const char *k1, const char *v1,
		      const char *k2, const char *v2, uint64_t v)
{
	struct obuf *o = w->o;

	if (w->json) {
		ob_str(o, w->nsamp++ ? ",{\"labels\":{" : "{\"labels\":{");
		ob_json(o, k1);
		ob_str(o, ":");
		ob_json(o, v1);
		if (k2) {
			ob_str(o, ",");
			ob_json(o, k2);
			ob_str(o, ":");
			ob_json(o, v2);
		}
		ob_printf(o, "},\"value\":%" PRIu64 "}", v);
		return;
	}
	ob_begin(o, 'o');
	ob_printf(o, "%s{%s=\"", w->fam, k1);
	ob_prom_label(o, v1);
	if (k2) {
		ob_printf(o, "\",%s=\"", k2);
		ob_prom_label(o, v2);
	}
	ob_printf(o, "\"} %" PRIu64, v);
	ob_end(o);
}

struct metric {
	const char *name, *type, *help;
	uint64_t v;
};

/* The engine-wide families, from eng_get_stats(). */
static void prom_stats(struct pw *w, const struct eng_stats *s)
{
	const struct metric m[] = {
		{ "reftfs_start_time_seconds", "gauge",
		  "Unix time reftfsd started.", (uint64_t)s->start_time },
		{ "reftfs_memory_budget_bytes", "gauge",
		  "Memory budget for file data.", s->mem_budget },
		{ "reftfs_memory_used_bytes", "gauge",
		  "Arena memory in use.", s->mem_used },
		{ "reftfs_memory_prefaulted_bytes", "gauge",
		  "Arena memory faulted in ahead of use.", s->mem_prefaulted },
		{ "reftfs_chunk_size_bytes", "gauge",
		  "Size of one arena chunk.", s->chunk_size },
		{ "reftfs_chunks", "gauge",
		  "Chunks in the arena.", s->chunks_total },
		{ "reftfs_chunks_used", "gauge",
		  "Arena chunks in use.", s->chunks_used },
		{ "reftfs_chunks_evictable", "gauge",
		  "Chunks in use that could be evicted now.",
		  s->chunks_evictable },
		{ "reftfs_files", "gauge", "Regular files.", s->files },
		{ "reftfs_directories", "gauge", "Directories.", s->dirs },
		{ "reftfs_checkpoints", "gauge",
		  "Checkpoints (top-level directories).", s->checkpoints },
		{ "reftfs_logical_bytes", "gauge",
		  "Sum of file sizes.", s->bytes_logical },
		{ "reftfs_resident_bytes", "gauge",
		  "File bytes resident in RAM.", s->bytes_resident },
		{ "reftfs_write_ops_total", "counter",
		  "Write requests.", s->write_ops },
		{ "reftfs_write_bytes_total", "counter",
		  "Bytes written.", s->write_bytes },
		{ "reftfs_read_ops_total", "counter",
		  "Read requests.", s->read_ops },
		{ "reftfs_read_bytes_total", "counter",
		  "Bytes read.", s->read_bytes },
		{ "reftfs_enospc_total", "counter",
		  "Writes that failed with ENOSPC.", s->enospc },
		{ "reftfs_crc_errors_total", "counter",
		  "Chunks that failed their CRC32C check.", s->crc_errors },
		{ "reftfs_evicted_chunks_total", "counter",
		  "Chunks evicted from RAM.", s->evicted_chunks },
		{ "reftfs_readthrough_chunks_total", "counter",
		  "Chunks read back from the persist tier.",
		  s->readthrough_chunks },
		{ "reftfs_readthrough_bytes_total", "counter",
		  "Bytes read back from the persist tier.",
		  s->readthrough_bytes },
		{ "reftfs_persist_enabled", "gauge",
		  "1 if a persist tier is configured.", s->persist_enabled },
		{ "reftfs_persist_healthy", "gauge",
		  "1 if the last write-back succeeded.", s->persist_healthy },
		{ "reftfs_persist_written_files_total", "counter",
		  "Files written back to the persist tier.", s->persist_files },
		{ "reftfs_persist_written_bytes_total", "counter",
		  "Bytes written back to the persist tier.", s->persist_bytes },
		{ "reftfs_persist_errors_total", "counter",
		  "Failed write-back attempts.", s->persist_errors },
		{ "reftfs_persist_pending_files", "gauge",
		  "Files waiting for write-back.", s->persist_pending_files },
		{ "reftfs_persist_pending_bytes", "gauge",
		  "Bytes waiting for write-back.", s->persist_pending_bytes },
		{ "reftfs_persist_last_error_time_seconds", "gauge",
		  "Unix time of the last write-back error, 0 if none.",
		  (uint64_t)s->persist_last_error_time },
		{ "reftfs_persist_last_success_time_seconds", "gauge",
		  "Unix time of the last successful write-back, 0 if none.",
		  (uint64_t)s->persist_last_ok_time },
	};
	size_t i;

	pw_family(w, "reftfs_build_info", "gauge",
		  "Version of reftfsd; the value is always 1.", true);
	pw_sample(w, "version", RFT_VERSION, NULL, NULL, 1);
	for (i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		pw_family(w, m[i].name, m[i].type, m[i].help, false);
		pw_value(w, m[i].v);
	}
}

enum ck_field { CK_SEQ, CK_FILES, CK_BYTES, CK_RESIDENT };

static uint64_t ck_get(const struct ck *k, enum ck_field f)
{
	switch (f) {
	case CK_SEQ:
		return k->seq;
	case CK_FILES:
		return k->files;
	case CK_BYTES:
		return k->bytes;
	case CK_RESIDENT:
		return k->resident;
	}
	return 0;
}

/* The per-checkpoint families, labelled checkpoint="NAME". */
static void prom_ckpts(struct pw *w, const struct cklist *cl)
{
	static const struct {
		const char *name, *help;
		enum ck_field f;
	} m[] = {
		{ "reftfs_checkpoint_seq",
		  "Creation order of the checkpoint, from 1.", CK_SEQ },
		{ "reftfs_checkpoint_files", "Files in the checkpoint.",
		  CK_FILES },
		{ "reftfs_checkpoint_bytes",
		  "Sum of the checkpoint's file sizes.", CK_BYTES },
		{ "reftfs_checkpoint_resident_bytes",
		  "Bytes of the checkpoint resident in RAM.", CK_RESIDENT },
	};
	static const enum eng_state states[] = {
		ENG_STATE_WRITING, ENG_STATE_SEALED, ENG_STATE_PROTECTED,
		ENG_STATE_PERSISTED
	};
	size_t i, j;

	for (i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		pw_family(w, m[i].name, "gauge", m[i].help, true);
		for (j = 0; j < cl->n; j++)
			pw_sample(w, "checkpoint", cl->v[j].name, NULL, NULL,
				  ck_get(&cl->v[j], m[i].f));
	}
	pw_family(w, "reftfs_checkpoint_state", "gauge",
		  "1 for the checkpoint's state (the weakest of its files).",
		  true);
	for (i = 0; i < cl->n; i++)
		for (j = 0; j < sizeof(states) / sizeof(states[0]); j++)
			pw_sample(w, "checkpoint", cl->v[i].name, "state",
				  state_name(states[j]),
				  cl->v[i].state == states[j]);
	pw_family(w, "reftfs_checkpoint_flag", "gauge",
		  "1 if the checkpoint is in the keep window (flag=\"keep\") "
		  "or selected for write-back (flag=\"persist\").",
		  true);
	for (i = 0; i < cl->n; i++) {
		pw_sample(w, "checkpoint", cl->v[i].name, "flag", "keep",
			  cl->v[i].keep);
		pw_sample(w, "checkpoint", cl->v[i].name, "flag", "persist",
			  cl->v[i].persist);
	}
	pw_close(w);
}

static int cmd_metrics(struct ctl_req *r, struct obuf *o)
{
	struct pw w = { .o = o, .json = r->json };
	struct eng_stats st;
	struct cklist cl = { 0 };
	int rc;

	memset(&st, 0, sizeof(st));
	eng_get_stats(r->c->e, &st);
	rc = ck_collect(r->c->e, &cl);
	if (rc < 0) {
		ob_line(o, 'e', "metrics: listing checkpoints: %s",
			err_name(rc));
		ck_release(&cl);
		return CTL_EXIT_FAIL;
	}
	if (w.json) {
		ob_begin(o, 'o');
		ob_str(o, "{");
	}
	prom_stats(&w, &st);
	prom_ckpts(&w, &cl);
	if (w.json) {
		ob_str(o, "}");
		ob_end(o);
	}
	ck_release(&cl);
	return CTL_EXIT_OK;
}

/* --- version, help, dispatch -------------------------------------------- */

static int cmd_version(struct ctl_req *r, struct obuf *o)
{
	if (r->json) {
		ob_begin(o, 'o');
		ob_str(o, "{\"version\":");
		ob_json(o, RFT_VERSION);
		ob_printf(o, ",\"protocol\":%d,\"pid\":%d}", RFS_CTL_PROTOCOL,
			  (int)getpid());
		ob_end(o);
	} else {
		ob_line(o, 'o', "reftfsd %s, control protocol %d, pid %d",
			RFT_VERSION, RFS_CTL_PROTOCOL, (int)getpid());
	}
	return CTL_EXIT_OK;
}

static int cmd_help(struct ctl_req *r, struct obuf *o);

static const struct ctl_cmd ctl_cmds[] = {
	{ "status", CMD_JSON, "[--json]",
	  "memory, contents, persist tier, counters, checkpoints", cmd_status },
	{ "ls", CMD_JSON | CMD_PATH, "[PATH] [--json]",
	  "state, size, tier and checksum of the files under PATH", cmd_ls },
	{ "flush", CMD_JSON | CMD_WAIT, "[--wait] [--json]",
	  "write back everything sealed now; --wait shows progress",
	  cmd_flush },
	{ "metrics", CMD_JSON, "[--json]", "Prometheus text exposition",
	  cmd_metrics },
	{ "version", CMD_JSON, "[--json]", "daemon version", cmd_version },
	{ "help", 0, "", "this list", cmd_help },
};

#define NCMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

static int cmd_help(struct ctl_req *r, struct obuf *o)
{
	size_t i;
	char syn[64];

	ob_line(o, 'o', "commands:");
	for (i = 0; i < NCMDS; i++) {
		snprintf(syn, sizeof(syn), "%s %s", ctl_cmds[i].name,
			 ctl_cmds[i].usage);
		ob_line(o, 'o', "  %-26s %s", syn, ctl_cmds[i].help);
	}
	return CTL_EXIT_OK;
}

static int usage_error(struct obuf *o, const struct ctl_cmd *cmd,
		       const char *what, const char *arg)
{
	ob_begin(o, 'e');
	ob_printf(o, "%s: %s '", cmd->name, what);
	ob_text(o, arg);
	ob_str(o, "'");
	ob_end(o);
	ob_line(o, 'e', "usage: %s%s%s", cmd->name, *cmd->usage ? " " : "",
		cmd->usage);
	return CTL_EXIT_USAGE;
}

static int parse_args(struct ctl_req *r, int argc, char **argv,
		      struct obuf *o)
{
	const struct ctl_cmd *cmd = r->cmd;
	bool opts_done = false;
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!opts_done && a[0] == '-' && a[1]) {
			if (!strcmp(a, "--"))
				opts_done = true;
			else if (!strcmp(a, "--json") && (cmd->opts & CMD_JSON))
				r->json = true;
			else if (!strcmp(a, "--wait") && (cmd->opts & CMD_WAIT))
				r->wait = true;
			else
				return usage_error(o, cmd, "unknown option", a);
		} else if ((cmd->opts & CMD_PATH) && !r->path) {
			r->path = a;
		} else {
			return usage_error(o, cmd, "unexpected argument", a);
		}
	}
	return CTL_EXIT_OK;
}

/* Parse and run one request line; returns an exit code or CTL_GONE. */
static int ctl_run(struct ctl_req *r, char *line, struct obuf *o)
{
	char *argv[CTL_MAX_ARGS];
	const char *why = "";
	size_t i;
	int argc, code;

	argc = split_words(line, argv, CTL_MAX_ARGS, &why);
	if (argc < 0) {
		ob_line(o, 'e', "malformed request: %s", why);
		return CTL_EXIT_USAGE;
	}
	if (!argc) {
		ob_line(o, 'e', "empty request (try 'help')");
		return CTL_EXIT_USAGE;
	}
	for (i = 0; i < NCMDS; i++)
		if (!strcmp(argv[0], ctl_cmds[i].name))
			break;
	if (i == NCMDS) {
		ob_begin(o, 'e');
		ob_str(o, "unknown command '");
		ob_text(o, argv[0]);
		ob_str(o, "' (try 'help')");
		ob_end(o);
		return CTL_EXIT_USAGE;
	}
	r->cmd = &ctl_cmds[i];
	code = parse_args(r, argc, argv, o);
	if (code != CTL_EXIT_OK)
		return code;
	return r->cmd->fn(r, o);
}

static void ctl_serve(struct rfs_ctl *c, int fd)
{
	struct timeval tv = { .tv_sec = CTL_IO_MS / 1000 };
	struct ctl_req r = { .c = c, .fd = fd };
	char line[RFS_CTL_MAX_LINE + 1], x[32];
	struct obuf o = { 0 };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int rc, code;

	/* A client that stops reading can hold a send this long at most. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		rft_warn("control socket: SO_SNDTIMEO: %s", strerror(errno));
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		rft_warn("control socket: no peer credentials: %s",
			 strerror(errno));
		return;
	}
	if (cred.uid != 0 && cred.uid != geteuid()) {
		rft_warn("control socket: refused uid %u (pid %d)",
			 (unsigned)cred.uid, (int)cred.pid);
		ob_line(&o, 'e', "permission denied: only root and uid %u "
			"may use this socket", (unsigned)geteuid());
		code = CTL_EXIT_FAIL;
		goto reply;
	}

	rc = ctl_read_request(c, fd, line);
	switch (rc) {
	case 0:
		rft_dbg("control socket: uid %u pid %d: %.200s",
			(unsigned)cred.uid, (int)cred.pid, line);
		code = ctl_run(&r, line, &o);
		break;
	case -E2BIG:
		ob_line(&o, 'e', "request longer than %d bytes",
			RFS_CTL_MAX_LINE - 1);
		code = CTL_EXIT_USAGE;
		break;
	case -ETIMEDOUT:
		ob_line(&o, 'e', "no request line within %d s",
			CTL_IO_MS / 1000);
		code = CTL_EXIT_USAGE;
		break;
	case -EINVAL:
		ob_line(&o, 'e', "malformed request: NUL byte");
		code = CTL_EXIT_USAGE;
		break;
	default: /* gone, or we are stopping: nobody to answer */
		goto out;
	}
	if (code == CTL_GONE)
		goto out;
reply:
	if (o.err) {
		/* Drop the partial answer; say why in a line we can afford. */
		static const char big[] = "e answer larger than 64 MiB; "
					  "ask for less\n";
		static const char nomem[] = "e reftfsd is out of memory\n";

		o.len = 0;
		if (o.err == -EFBIG)
			rc = send_all(fd, big, sizeof(big) - 1);
		else
			rc = send_all(fd, nomem, sizeof(nomem) - 1);
		if (rc < 0)
			goto out;
		code = CTL_EXIT_FAIL;
	} else if (ob_send(&r, &o) < 0) {
		goto out;
	}
	snprintf(x, sizeof(x), "x %d\n", code);
	send_all(fd, x, strlen(x));
out:
	free(o.buf);
}

/* --- threads ------------------------------------------------------------ */

/*
 * Unread input at close() makes the kernel fail the client's reads with
 * ECONNRESET: drain what is queued (a request that was too long, words
 * after the line) so that the client sees our answer and a clean EOF.
 */
static void ctl_drain(int fd)
{
	char junk[4096];
	int i;

	for (i = 0; i < 256; i++)
		if (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) <= 0)
			break;
}

static void *ctl_client_main(void *arg)
{
	struct ctl_slot *s = arg;
	struct rfs_ctl *c = s->c;

	pthread_setname_np(pthread_self(), "rft-ctl-client");
	ctl_serve(c, s->fd);
	ctl_drain(s->fd);

	pthread_mutex_lock(&c->lock);
	close(s->fd);
	s->fd = -1;
	s->state = SLOT_DONE;
	pthread_cond_broadcast(&c->slot_done);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Hand @fd to a thread of its own; closes it if that cannot be done. */
static void ctl_dispatch(struct rfs_ctl *c, int fd)
{
	static const char busy[] = "e reftfsd is serving too many control "
				   "clients; try again\nx 1\n";
	static const char nothread[] = "e reftfsd cannot start a thread "
				       "for this request\nx 1\n";
	struct ctl_slot *s = NULL;
	const char *msg = busy;
	size_t msglen = sizeof(busy) - 1;
	struct timespec until;
	int i, rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += CTL_BUSY_MS / 1000;
	pthread_mutex_lock(&c->lock);
	/* A burst of short requests: wait a moment for a thread to end. */
	while (!c->stopping && rc != ETIMEDOUT) {
		for (i = 0; i < RFS_CTL_MAX_CLIENTS; i++) {
			if (c->slots[i].state == SLOT_DONE) {
				/* It only has to return: it let go of lock. */
				pthread_join(c->slots[i].thread, NULL);
				c->slots[i].state = SLOT_FREE;
			}
			if (!s && c->slots[i].state == SLOT_FREE)
				s = &c->slots[i];
		}
		if (s)
			break;
		rc = pthread_cond_timedwait(&c->slot_done, &c->lock, &until);
	}
	if (s) {
		s->fd = fd;
		s->state = SLOT_RUNNING;
		rc = pthread_create(&s->thread, NULL, ctl_client_main, s);
		if (!rc) {
			pthread_mutex_unlock(&c->lock);
			return;
		}
		s->fd = -1;
		s->state = SLOT_FREE;
		rft_warn("control socket: cannot start a thread: %s",
			 strerror(rc));
		msg = nothread;
		msglen = sizeof(nothread) - 1;
	}
	pthread_mutex_unlock(&c->lock);
	/* Fits in an empty socket buffer: never blocks the acceptor. */
	if (send(fd, msg, msglen, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		rft_dbg("control socket: busy reply: %s", strerror(errno));
	ctl_drain(fd);
	close(fd);
}

static void *ctl_accept_main(void *arg)
{
	struct rfs_ctl *c = arg;
	struct pollfd pfd[2] = {
		{ .fd = c->wakefd, .events = POLLIN },
		{ .fd = c->lfd, .events = POLLIN },
	};
	bool warned = false;
	int fd, n = 2;

	pthread_setname_np(pthread_self(), "rft-ctl");
	for (;;) {
		/* After a resource error, wait watching only the wake fd. */
		if (poll(pfd, n, n == 2 ? -1 : CTL_BACKOFF_MS) < 0) {
			if (errno != EINTR) {
				rft_err("control socket: poll: %s",
					strerror(errno));
				n = 1;
			}
			continue;
		}
		if (pfd[0].revents)
			break;
		if (n == 1) {
			n = 2;
			continue;
		}
		if (!(pfd[1].revents & POLLIN)) {
			if (pfd[1].revents) /* POLLERR: do not spin on it */
				n = 1;
			continue;
		}
		fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			switch (errno) {
			case EAGAIN:
			case EINTR:
			case ECONNABORTED:
			case EPROTO:
				break;
			default:
				/* EMFILE, ENFILE, ENOBUFS, ENOMEM: back off. */
				if (!warned)
					rft_warn("control socket: accept: %s",
						 strerror(errno));
				warned = true;
				n = 1;
			}
			continue;
		}
		warned = false;
		ctl_dispatch(c, fd);
	}
	return NULL;
}

/* --- socket setup ------------------------------------------------------- */

/*
 * Create the directories above @path (the last one 0700) and check that
 * the one holding the socket is ours or root's and not open to others.
 */
static int ctl_mkparent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct stat st;
	char *p;

	snprintf(dir, sizeof(dir), "%s", path);
	p = strrchr(dir, '/');
	if (!p)
		return 0; /* relative, in the working directory */
	if (p == dir)
		p[1] = '\0';
	else
		*p = '\0';
	for (p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			rft_err("control socket directory %s: %s", dir,
				strerror(errno));
			return -errno;
		}
		*p = '/';
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rft_err("control socket directory %s: %s", dir,
			strerror(errno));
		return -errno;
	}
	if (stat(dir, &st) < 0) {
		rft_err("control socket directory %s: %s", dir,
			strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		rft_err("control socket directory %s is not a directory", dir);
		return -ENOTDIR;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		rft_err("control socket directory %s belongs to uid %u, not "
			"to us (uid %u)",
			dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		rft_err("control socket directory %s is writable by others "
			"(mode %04o)",
			dir, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Something is at @path: -EADDRINUSE if a server answers there, 0 once a
 * stale socket is removed (or it vanished), else -errno.
 */
static int ctl_probe(const struct sockaddr_un *sa)
{
	const char *path = sa->sun_path;
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		rft_err("control socket %s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		rft_err("control socket %s: exists and is not a socket", path);
		return -EEXIST;
	}
	/* Non-blocking: a live server with a full backlog says EAGAIN. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rft_err("control socket: socket: %s", strerror(errno));
		return -errno;
	}
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	rc = rc < 0 ? -errno : 0;
	close(fd);
	switch (rc) {
	case 0:
	case -EAGAIN:
	case -EINPROGRESS:
		rft_err("control socket %s is in use by another reftfsd",
			path);
		return -EADDRINUSE;
	case -ECONNREFUSED:
		rft_info("control socket %s: removing a stale socket", path);
		if (unlink(path) < 0 && errno != ENOENT) {
			rft_err("control socket %s: unlink: %s", path,
				strerror(errno));
			return -errno;
		}
		return 0;
	case -ENOENT:
		return 0;
	default:
		rft_err("control socket %s: probing it: %s", path,
			err_name(rc));
		return rc;
	}
}

static int ctl_listen(struct rfs_ctl *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int tries, rc;

	memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0);
	if (c->lfd < 0) {
		rc = -errno;
		rft_err("control socket: socket: %s", err_name(rc));
		return rc;
	}
	/* Linux gives the bound node the socket inode's mode: 0600 at once. */
	if (fchmod(c->lfd, 0600) < 0)
		rft_dbg("control socket: fchmod: %s", strerror(errno));
	for (tries = 0;; tries++) {
		if (bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		rc = -errno;
		if (rc != -EADDRINUSE || tries == 2) {
			rft_err("control socket %s: bind: %s", c->path,
				err_name(rc));
			return rc;
		}
		rc = ctl_probe(&sa);
		if (rc < 0)
			return rc;
	}
	if (chmod(c->path, 0600) < 0 || lstat(c->path, &st) < 0) {
		rc = -errno;
		rft_err("control socket %s: %s", c->path, err_name(rc));
		unlink(c->path);
		return rc;
	}
	c->sock_dev = st.st_dev;
	c->sock_ino = st.st_ino;
	/* Room for a burst of clients while the slots are busy. */
	if (listen(c->lfd, 128) < 0) {
		rc = -errno;
		rft_err("control socket %s: listen: %s", c->path,
			err_name(rc));
		unlink(c->path);
		c->sock_ino = 0;
		return rc;
	}
	return 0;
}

/* Unlink the socket node if it is still the one we bound. */
static void ctl_unlink(struct rfs_ctl *c)
{
	struct stat st;

	if (!c->sock_ino || lstat(c->path, &st) < 0)
		return;
	if (st.st_dev == c->sock_dev && st.st_ino == c->sock_ino &&
	    unlink(c->path) < 0)
		rft_warn("control socket %s: unlink: %s", c->path,
			 strerror(errno));
}

int rfs_ctl_new(struct eng *e, const char *path, struct rfs_ctl **out)
{
	struct rfs_ctl *c;
	int i, rc;

	*out = NULL;
	if (!path || !*path) {
		rft_err("control socket: no path");
		return -EINVAL;
	}
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		rft_err(
		    "control socket path %s is too long (at most %zu bytes)",
		    path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return -ENAMETOOLONG;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->e = e;
	c->lfd = -1;
	c->wakefd = -1;
	for (i = 0; i < RFS_CTL_MAX_CLIENTS; i++) {
		c->slots[i].c = c;
		c->slots[i].fd = -1;
	}
	rc = pthread_mutex_init(&c->lock, NULL);
	if (rc) {
		free(c);
		return -rc;
	}
	rc = pthread_cond_init(&c->slot_done, NULL);
	if (rc) {
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -rc;
	}
	c->path = strdup(path);
	if (!c->path) {
		rc = -ENOMEM;
		goto fail;
	}
	c->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wakefd < 0) {
		rc = -errno;
		rft_err("control socket: eventfd: %s", err_name(rc));
		goto fail;
	}
	rc = ctl_mkparent(path);
	if (rc < 0)
		goto fail;
	rc = ctl_listen(c);
	if (rc < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	rfs_ctl_free(c);
	return rc;
}

int rfs_ctl_start(struct rfs_ctl *c)
{
	sigset_t all, old;
	int rc;

	if (c->started)
		return -EALREADY;
	/* Signals belong to the FUSE loop: our threads inherit a full mask. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&c->acceptor, NULL, ctl_accept_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		rft_err("control socket: cannot start its thread: %s",
			strerror(rc));
		return -rc;
	}
	c->started = true;
	return 0;
}

/* Is a client thread still serving?  c->lock held. */
static bool ctl_running(const struct rfs_ctl *c)
{
	int i;

	for (i = 0; i < RFS_CTL_MAX_CLIENTS; i++)
		if (c->slots[i].state == SLOT_RUNNING)
			return true;
	return false;
}

void rfs_ctl_free(struct rfs_ctl *c)
{
	pthread_t joins[RFS_CTL_MAX_CLIENTS];
	struct timespec until;
	uint64_t one = 1;
	int i, n = 0;

	if (!c)
		return;
	if (c->started) {
		if (write(c->wakefd, &one, sizeof(one)) != sizeof(one))
			rft_err("control socket: cannot wake its threads: %s",
				strerror(errno));
		pthread_mutex_lock(&c->lock);
		c->stopping = true;
		pthread_cond_broadcast(&c->slot_done);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->acceptor, NULL);
		/*
		 * Clients see the wake fd and say goodbye ("reftfsd is
		 * stopping"); give them a moment, then shut the sockets of
		 * any still blocked in a send to a client that does not read.
		 */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += CTL_GRACE_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&c->lock);
		while (ctl_running(c))
			if (pthread_cond_timedwait(&c->slot_done, &c->lock,
						   &until) == ETIMEDOUT)
				break;
		for (i = 0; i < RFS_CTL_MAX_CLIENTS; i++) {
			struct ctl_slot *s = &c->slots[i];

			if (s->state == SLOT_RUNNING && s->fd >= 0)
				shutdown(s->fd, SHUT_RDWR);
			if (s->state != SLOT_FREE)
				joins[n++] = s->thread;
		}
		pthread_mutex_unlock(&c->lock);
		for (i = 0; i < n; i++)
			pthread_join(joins[i], NULL);
		c->started = false;
	}
	if (c->lfd >= 0) {
		ctl_unlink(c);
		close(c->lfd);
	}
	if (c->wakefd >= 0)
		close(c->wakefd);
	pthread_cond_destroy(&c->slot_done);
	pthread_mutex_destroy(&c->lock);
	free(c->path);
	free(c);
}
