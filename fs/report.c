/*
 * report.c - reports of the control socket: values, and the three
 * renderers (JSON, Prometheus, human text) that every command shares.
 *
 * The renderers never see the engine: a report is filled first, with
 * copies of everything, and rendered afterwards.  That keeps formatting
 * out of engine callbacks, which run under engine locks.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report.h"

/* --- answer buffer ------------------------------------------------------ */

static int out_reserve(struct rep_out *o, size_t n)
{
	size_t cap;
	char *p;

	if (o->err)
		return o->err;
	if (n <= o->cap - o->len)
		return 0;
	if (n > REP_OUT_MAX - o->len) {
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

void rep_out_add(struct rep_out *o, const void *p, size_t n)
{
	if (!n || out_reserve(o, n))
		return;
	memcpy(o->buf + o->len, p, n);
	o->len += n;
}

void rep_out_str(struct rep_out *o, const char *s)
{
	rep_out_add(o, s, strlen(s));
}

__attribute__((format(printf, 2, 0))) static void
out_vprintf(struct rep_out *o, const char *fmt, va_list ap)
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
	if (out_reserve(o, (size_t)n + 1))
		return;
	vsnprintf(o->buf + o->len, (size_t)n + 1, fmt, ap);
	end = o->buf + o->len + n;
	for (p = o->buf + o->len; (p = memchr(p, '\n', end - p)); p++)
		*p = ' ';
	o->len += n;
}

void rep_out_printf(struct rep_out *o, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	out_vprintf(o, fmt, ap);
	va_end(ap);
}

void rep_out_begin(struct rep_out *o, char tag)
{
	char t[2] = { tag, ' ' };

	rep_out_add(o, t, sizeof(t));
}

void rep_out_end(struct rep_out *o)
{
	rep_out_add(o, "\n", 1);
}

void rep_out_line(struct rep_out *o, char tag, const char *fmt, ...)
{
	va_list ap;

	rep_out_begin(o, tag);
	va_start(ap, fmt);
	out_vprintf(o, fmt, ap);
	va_end(ap);
	rep_out_end(o);
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

void rep_out_text(struct rep_out *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	uint32_t cp = 0; /* utf8_seq() leaves it unset for bad bytes */
	int n, i;

	while (*p) {
		n = utf8_seq(p, &cp);
		if ((n == 1 && cp >= 0x20 && cp != 0x7f && cp != '\\') ||
		    (n > 1 && cp >= 0xa0 && !is_line_sep(cp))) {
			rep_out_add(o, p, n);
			p += n;
			continue;
		}
		if (n == 1 && cp == '\\')
			rep_out_str(o, "\\\\");
		else if (n == 1 && cp == '\n')
			rep_out_str(o, "\\n");
		else if (n == 1 && cp == '\t')
			rep_out_str(o, "\\t");
		else if (n == 1 && cp == '\r')
			rep_out_str(o, "\\r");
		else if (is_line_sep(cp))
			rep_out_printf(o, "\\u%04x", (unsigned)cp);
		else
			for (i = 0; i < (n ? n : 1); i++)
				rep_out_printf(o, "\\x%02x", p[i]);
		p += n ? n : 1;
	}
}

/* A JSON string body (no quotes); C1 controls escaped too (NEL). */
static void out_json_body(struct rep_out *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	uint32_t cp;
	int n;

	while (*p) {
		n = utf8_seq(p, &cp);
		if (!n) {
			rep_out_str(o, "\\ufffd");
			p++;
			continue;
		}
		if (n > 1) {
			if (cp < 0xa0 || is_line_sep(cp))
				rep_out_printf(o, "\\u%04x", (unsigned)cp);
			else
				rep_out_add(o, p, n);
			p += n;
			continue;
		}
		switch (cp) {
		case '"':
			rep_out_str(o, "\\\"");
			break;
		case '\\':
			rep_out_str(o, "\\\\");
			break;
		case '\n':
			rep_out_str(o, "\\n");
			break;
		case '\r':
			rep_out_str(o, "\\r");
			break;
		case '\t':
			rep_out_str(o, "\\t");
			break;
		default:
			if (cp < 0x20 || cp == 0x7f)
				rep_out_printf(o, "\\u%04x", (unsigned)cp);
			else
				rep_out_add(o, p, 1);
		}
		p++;
	}
}

void rep_out_json(struct rep_out *o, const char *s)
{
	rep_out_add(o, "\"", 1);
	out_json_body(o, s);
	rep_out_add(o, "\"", 1);
}

/*
 * A Prometheus label value (no quotes).  The format escapes only \\, \"
 * and \n; other control characters, line separators and bytes that are
 * not UTF-8 become U+FFFD so that no reader splits the line.
 */
static void out_prom_label(struct rep_out *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	uint32_t cp;
	int n;

	while (*p) {
		n = utf8_seq(p, &cp);
		if (!n) {
			rep_out_str(o, "\xef\xbf\xbd");
			p++;
		} else if (n == 1 && cp == '\\') {
			rep_out_str(o, "\\\\");
			p++;
		} else if (n == 1 && cp == '"') {
			rep_out_str(o, "\\\"");
			p++;
		} else if (n == 1 && cp == '\n') {
			rep_out_str(o, "\\n");
			p++;
		} else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0) ||
			   is_line_sep(cp)) {
			rep_out_str(o, "\xef\xbf\xbd");
			p += n;
		} else {
			rep_out_add(o, p, n);
			p += n;
		}
	}
}

/* Terminal columns of @n bytes of UTF-8 (escaped text: one per char). */
static int text_cols(const char *s, size_t n)
{
	int cols = 0;

	for (size_t i = 0; i < n; i++)
		cols += ((unsigned char)s[i] & 0xc0) != 0x80;
	return cols;
}

/* --- human units -------------------------------------------------------- */

static void put_bytes(struct rep_out *o, uint64_t v)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB",
					    "PiB", "EiB" };
	double d = (double)v / 1024;
	unsigned u = 0;

	if (v < 1024) {
		rep_out_printf(o, "%" PRIu64 " B", v);
		return;
	}
	while (d >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		d /= 1024;
		u++;
	}
	rep_out_printf(o, "%.1f %s", d, unit[u]);
}

static void put_dur(struct rep_out *o, uint64_t s)
{
	uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

	s %= 60;
	if (d)
		rep_out_printf(o, "%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m",
			       d, h, m);
	else if (h)
		rep_out_printf(o, "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s",
			       h, m, s);
	else if (m)
		rep_out_printf(o, "%" PRIu64 "m %02" PRIu64 "s", m, s);
	else
		rep_out_printf(o, "%" PRIu64 "s", s);
}

static void put_time(struct rep_out *o, int64_t v)
{
	time_t t = (time_t)v;
	struct tm tm;
	char buf[64];

	if (!t || !localtime_r(&t, &tm) ||
	    !strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm))
		rep_out_str(o, "never");
	else
		rep_out_str(o, buf);
}

/* "3m 05s ago", "in the future" if the clock went back. */
static void put_ago(struct rep_out *o, int64_t t)
{
	int64_t now = (int64_t)time(NULL);

	if (!t) {
		rep_out_str(o, "never");
	} else if (now < t) {
		rep_out_str(o, "in the future");
	} else {
		put_dur(o, (uint64_t)(now - t));
		rep_out_str(o, " ago");
	}
}

/* --- values ------------------------------------------------------------- */

struct rep_rows {
	struct rep_obj **v;
	size_t n, cap;
};

struct rep_val {
	bool set;
	union {
		uint64_t u; /* COUNT, BYTES, SECONDS, ENUM, FLAGS */
		int64_t i;  /* INT, TIME */
		double d;   /* PERCENT */
		bool b;
		char *s;
		struct rep_obj *obj;
		struct rep_rows *rows;
	};
};

struct rep_obj {
	struct rep *r;
	const struct rep_field *fields;
	unsigned n;
	struct rep_val v[];
};

struct rep {
	const struct rep_field *root;
	struct rep_val v;
	size_t bytes; /* allocated for values: bounded by REP_OUT_MAX */
	int err;
};

static void *rep_alloc(struct rep *r, size_t n)
{
	void *p;

	if (r->err)
		return NULL;
	if (n > REP_OUT_MAX - r->bytes) {
		r->err = -EFBIG;
		return NULL;
	}
	p = calloc(1, n);
	if (!p) {
		r->err = -ENOMEM;
		return NULL;
	}
	r->bytes += n;
	return p;
}

static void obj_free(struct rep_obj *o);

static void rows_free(struct rep_rows *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		obj_free(t->v[i]);
	free(t->v);
	free(t);
}

static void obj_free(struct rep_obj *o)
{
	if (!o)
		return;
	for (unsigned i = 0; i < o->n; i++) {
		if (!o->v[i].set)
			continue;
		switch (o->fields[i].type) {
		case REP_STRING:
			free(o->v[i].s);
			break;
		case REP_OBJECT:
			obj_free(o->v[i].obj);
			break;
		case REP_TABLE:
			rows_free(o->v[i].rows);
			break;
		default:
			break;
		}
	}
	free(o);
}

/* A container value of field @f: objects are filled out at once. */
static int val_new(struct rep *r, const struct rep_field *f,
		   struct rep_val *v);

static struct rep_obj *obj_new(struct rep *r, const struct rep_field *fields,
			       unsigned n)
{
	struct rep_obj *o;

	o = rep_alloc(r, sizeof(*o) + n * sizeof(o->v[0]));
	if (!o)
		return NULL;
	o->r = r;
	o->fields = fields;
	o->n = n;
	for (unsigned i = 0; i < n; i++) {
		if (val_new(r, &fields[i], &o->v[i]) < 0) {
			obj_free(o);
			return NULL;
		}
	}
	return o;
}

static int val_new(struct rep *r, const struct rep_field *f,
		   struct rep_val *v)
{
	if (f->type == REP_OBJECT) {
		v->obj = obj_new(r, f->fields, f->n);
		v->set = v->obj != NULL;
	} else if (f->type == REP_TABLE) {
		v->rows = rep_alloc(r, sizeof(*v->rows));
		v->set = v->rows != NULL;
	} else {
		return 0;
	}
	return v->set ? 0 : r->err;
}

struct rep *rep_new(const struct rep_field *root)
{
	struct rep *r = calloc(1, sizeof(*r));

	assert(root->type == REP_OBJECT || root->type == REP_TABLE);
	if (!r)
		return NULL;
	r->root = root;
	if (val_new(r, root, &r->v) < 0) {
		free(r);
		return NULL;
	}
	return r;
}

void rep_free(struct rep *r)
{
	if (!r)
		return;
	if (r->root->type == REP_OBJECT)
		obj_free(r->v.obj);
	else
		rows_free(r->v.rows);
	free(r);
}

int rep_err(const struct rep *r)
{
	return r->err;
}

struct rep_obj *rep_top(struct rep *r)
{
	assert(r->root->type == REP_OBJECT);
	return r->v.obj;
}

struct rep_obj *rep_obj(struct rep_obj *o, unsigned i)
{
	if (!o)
		return NULL;
	assert(i < o->n && o->fields[i].type == REP_OBJECT);
	return o->v[i].obj;
}

struct rep_obj *rep_row(struct rep *r, struct rep_obj *o, unsigned i)
{
	const struct rep_field *f = r->root;
	struct rep_rows *t = r->v.rows;
	struct rep_obj *row;

	if (o) {
		assert(i < o->n);
		f = &o->fields[i];
		t = o->v[i].rows;
	}
	assert(f->type == REP_TABLE);
	if (r->err)
		return NULL;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		struct rep_obj **v;

		if (cap * sizeof(*v) > REP_OUT_MAX - r->bytes) {
			r->err = -EFBIG;
			return NULL;
		}
		v = realloc(t->v, cap * sizeof(*v));
		if (!v) {
			r->err = -ENOMEM;
			return NULL;
		}
		r->bytes += (cap - t->cap) * sizeof(*v);
		t->v = v;
		t->cap = cap;
	}
	row = obj_new(r, f->fields, f->n);
	if (row)
		t->v[t->n++] = row;
	return row;
}

/* Field @i of @o for a setter, or NULL when nothing is to be set. */
static struct rep_val *slot(struct rep_obj *o, unsigned i)
{
	if (!o || o->r->err)
		return NULL;
	assert(i < o->n);
	return &o->v[i];
}

void rep_set_u64(struct rep_obj *o, unsigned i, uint64_t v)
{
	struct rep_val *s = slot(o, i);

	if (!s)
		return;
	assert(o->fields[i].type == REP_COUNT ||
	       o->fields[i].type == REP_BYTES ||
	       o->fields[i].type == REP_SECONDS ||
	       o->fields[i].type == REP_ENUM || o->fields[i].type == REP_FLAGS);
	s->u = v;
	s->set = true;
}

void rep_set_int(struct rep_obj *o, unsigned i, int64_t v)
{
	struct rep_val *s = slot(o, i);

	if (!s)
		return;
	assert(o->fields[i].type == REP_INT || o->fields[i].type == REP_TIME);
	s->i = v;
	s->set = true;
}

void rep_set_pct(struct rep_obj *o, unsigned i, double v)
{
	struct rep_val *s = slot(o, i);

	if (!s)
		return;
	assert(o->fields[i].type == REP_PERCENT);
	s->d = v;
	s->set = true;
}

void rep_set_bool(struct rep_obj *o, unsigned i, bool v)
{
	struct rep_val *s = slot(o, i);

	if (!s)
		return;
	assert(o->fields[i].type == REP_BOOL);
	s->b = v;
	s->set = true;
}

void rep_set_str(struct rep_obj *o, unsigned i, const char *str)
{
	struct rep_val *s = slot(o, i);
	size_t n;
	char *p;

	if (!s || !str)
		return;
	assert(o->fields[i].type == REP_STRING);
	n = strlen(str) + 1;
	p = rep_alloc(o->r, n);
	if (!p)
		return;
	memcpy(p, str, n);
	if (s->set)
		free(s->s);
	s->s = p;
	s->set = true;
}

/* The name of state @u of enum field @f. */
static const char *enum_name(const struct rep_field *f, uint64_t u)
{
	const char *n = f->name_of && u < f->n ? f->name_of((unsigned)u)
					      : NULL;

	return n ? n : "unknown";
}

/* --- JSON --------------------------------------------------------------- */

static void json_obj(struct rep_out *o, const struct rep_obj *obj);

static void json_rows(struct rep_out *o, const struct rep_rows *t)
{
	rep_out_add(o, "[", 1);
	for (size_t i = 0; i < t->n; i++) {
		if (i)
			rep_out_add(o, ",", 1);
		json_obj(o, t->v[i]);
	}
	rep_out_add(o, "]", 1);
}

static void json_val(struct rep_out *o, const struct rep_field *f,
		     const struct rep_val *v)
{
	if (!v->set) {
		rep_out_str(o, "null");
		return;
	}
	switch (f->type) {
	case REP_OBJECT:
		json_obj(o, v->obj);
		break;
	case REP_TABLE:
		json_rows(o, v->rows);
		break;
	case REP_COUNT:
	case REP_BYTES:
	case REP_SECONDS:
		rep_out_printf(o, "%" PRIu64, v->u);
		break;
	case REP_TIME:
		if (!v->i) {
			rep_out_str(o, "null");
			break;
		}
		/* fall through */
	case REP_INT:
		rep_out_printf(o, "%" PRId64, v->i);
		break;
	case REP_PERCENT:
		rep_out_printf(o, "%.1f", v->d);
		break;
	case REP_BOOL:
		rep_out_str(o, v->b ? "true" : "false");
		break;
	case REP_STRING:
		rep_out_json(o, v->s);
		break;
	case REP_ENUM:
		rep_out_json(o, enum_name(f, v->u));
		break;
	case REP_FLAGS:
		break; /* json_obj writes one key per flag */
	}
}

static void json_obj(struct rep_out *o, const struct rep_obj *obj)
{
	bool first = true;

	rep_out_add(o, "{", 1);
	for (unsigned i = 0; i < obj->n; i++) {
		const struct rep_field *f = &obj->fields[i];
		const struct rep_val *v = &obj->v[i];

		if (f->type == REP_FLAGS) {
			for (unsigned j = 0; j < f->n; j++) {
				rep_out_str(o, first ? "" : ",");
				rep_out_json(o, f->keys[j]);
				if (!v->set)
					rep_out_str(o, ":null");
				else if (v->u >> j & 1)
					rep_out_str(o, ":true");
				else
					rep_out_str(o, ":false");
				first = false;
			}
			continue;
		}
		rep_out_str(o, first ? "" : ",");
		rep_out_json(o, f->key);
		rep_out_add(o, ":", 1);
		json_val(o, f, v);
		first = false;
	}
	rep_out_add(o, "}", 1);
}

void rep_json(struct rep_out *o, const struct rep *r)
{
	rep_out_begin(o, 'o');
	json_val(o, r->root, &r->v);
	rep_out_end(o);
}

/* --- Prometheus --------------------------------------------------------- */

/* Families go out as exposition text, or as one JSON object. */
struct pw {
	struct rep_out *o;
	bool json;
	const char *fam; /* the family being written */
	bool labelled;	 /* it has labels (JSON: an array is open) */
	unsigned nfam, nsamp;
};

static void pw_close(struct pw *w)
{
	if (w->json && w->fam && w->labelled)
		rep_out_str(w->o, "]");
	w->fam = NULL;
}

static void pw_family(struct pw *w, const struct rep_field *f, bool labelled)
{
	const char *type = f->metric == REP_COUNTER ? "counter" : "gauge";

	pw_close(w);
	w->fam = f->prom;
	w->labelled = labelled;
	w->nsamp = 0;
	if (!w->json) {
		rep_out_line(w->o, 'o', "# HELP %s %s", f->prom, f->help);
		rep_out_line(w->o, 'o', "# TYPE %s %s", f->prom, type);
		return;
	}
	rep_out_str(w->o, w->nfam++ ? "," : "");
	rep_out_json(w->o, f->prom);
	rep_out_str(w->o, labelled ? ":[" : ":");
}

/* The value of @v as a sample: unset is 0, a bool 0 or 1. */
static void pw_num(struct rep_out *o, const struct rep_field *f,
		   const struct rep_val *v)
{
	if (!v->set)
		rep_out_str(o, "0");
	else if (f->type == REP_INT || f->type == REP_TIME)
		rep_out_printf(o, "%" PRId64, v->i);
	else if (f->type == REP_PERCENT)
		rep_out_printf(o, "%.1f", v->d);
	else if (f->type == REP_BOOL)
		rep_out_str(o, v->b ? "1" : "0");
	else
		rep_out_printf(o, "%" PRIu64, v->u);
}

/* The one sample of a family without labels. */
static void pw_value(struct pw *w, const struct rep_field *f,
		     const struct rep_val *v)
{
	if (w->json) {
		pw_num(w->o, f, v);
		return;
	}
	rep_out_begin(w->o, 'o');
	rep_out_printf(w->o, "%s ", w->fam);
	pw_num(w->o, f, v);
	rep_out_end(w->o);
}

/*
 * A sample labelled @k1 = @v1 and, unless @k2 is NULL, @k2 = @v2; its value
 * is @f's value @v, or @bit (0 or 1) when @f is NULL.
 */
static void pw_sample(struct pw *w, const char *k1, const char *v1,
		      const char *k2, const char *v2,
		      const struct rep_field *f, const struct rep_val *v,
		      bool bit)
{
	struct rep_out *o = w->o;

	if (w->json) {
		rep_out_str(o, w->nsamp++ ? ",{\"labels\":{"
					  : "{\"labels\":{");
		rep_out_json(o, k1);
		rep_out_str(o, ":");
		rep_out_json(o, v1);
		if (k2) {
			rep_out_str(o, ",");
			rep_out_json(o, k2);
			rep_out_str(o, ":");
			rep_out_json(o, v2);
		}
		rep_out_str(o, "},\"value\":");
		if (f)
			pw_num(o, f, v);
		else
			rep_out_str(o, bit ? "1" : "0");
		rep_out_str(o, "}");
		return;
	}
	rep_out_begin(o, 'o');
	rep_out_printf(o, "%s{%s=\"", w->fam, k1);
	out_prom_label(o, v1);
	if (k2) {
		rep_out_printf(o, "\",%s=\"", k2);
		out_prom_label(o, v2);
	}
	rep_out_str(o, "\"} ");
	if (f)
		pw_num(o, f, v);
	else
		rep_out_str(o, bit ? "1" : "0");
	rep_out_end(o);
}

/*
 * The samples of field @f, value @v, labelled @k = @kv (@k NULL: none):
 * a state or flag field gives one sample per state or flag.
 */
static void pw_samples(struct pw *w, const struct rep_field *f,
		       const struct rep_val *v, const char *k, const char *kv)
{
	const char *name;

	switch (f->type) {
	case REP_ENUM:
	case REP_FLAGS:
		for (unsigned j = 0; j < f->n; j++) {
			name = f->type == REP_ENUM ? enum_name(f, j)
						   : f->names[j];
			/* No row label: the state's own label comes first. */
			pw_sample(w, k ? k : f->label, k ? kv : name,
				  k ? f->label : NULL, name, NULL, NULL,
				  v->set && (f->type == REP_ENUM
						     ? v->u == j
						     : (v->u >> j & 1)));
		}
		break;
	case REP_STRING: /* REP_INFO */
		pw_sample(w, k ? k : f->label, k ? kv : v->s,
			  k ? f->label : NULL, v->s, NULL, NULL, true);
		break;
	default:
		if (k)
			pw_sample(w, k, kv, NULL, NULL, f, v, false);
		else
			pw_value(w, f, v);
	}
}

static bool has_labels(const struct rep_field *f)
{
	return f->type == REP_ENUM || f->type == REP_FLAGS ||
	       f->metric == REP_INFO;
}

static void prom_obj(struct pw *w, const struct rep_obj *obj);

/* A table's exported fields: a family each, a sample (or more) per row. */
static void prom_rows(struct pw *w, const struct rep_field *t,
		      const struct rep_rows *rows)
{
	for (unsigned c = 0; c < t->n; c++) {
		const struct rep_field *f = &t->fields[c];

		if (f->metric == REP_NOT_EXPORTED)
			continue;
		pw_family(w, f, true);
		for (size_t i = 0; i < rows->n; i++) {
			const struct rep_obj *row = rows->v[i];

			pw_samples(w, f, &row->v[c], t->label,
				   row->v[0].set ? row->v[0].s : "");
		}
	}
}

static void prom_obj(struct pw *w, const struct rep_obj *obj)
{
	for (unsigned i = 0; i < obj->n; i++) {
		const struct rep_field *f = &obj->fields[i];
		const struct rep_val *v = &obj->v[i];

		if (f->type == REP_OBJECT) {
			prom_obj(w, v->obj);
		} else if (f->type == REP_TABLE) {
			prom_rows(w, f, v->rows);
		} else if (f->metric != REP_NOT_EXPORTED &&
			   (f->type != REP_STRING || v->set)) {
			pw_family(w, f, has_labels(f));
			pw_samples(w, f, v, NULL, NULL);
		}
	}
}

void rep_prom(struct rep_out *o, const struct rep *r, bool json)
{
	struct pw w = { .o = o, .json = json };

	if (json) {
		rep_out_begin(o, 'o');
		rep_out_str(o, "{");
	}
	if (r->root->type == REP_OBJECT)
		prom_obj(&w, r->v.obj);
	else
		prom_rows(&w, r->root, r->v.rows);
	pw_close(&w);
	if (json) {
		rep_out_str(o, "}");
		rep_out_end(o);
	}
}

/* --- text --------------------------------------------------------------- */

/*
 * The field at @path (@len bytes, keys joined by '.') below @obj, or NULL;
 * *@fp is its schema.
 */
static const struct rep_val *find(const struct rep_obj *obj, const char *path,
				  size_t len, const struct rep_field **fp)
{
	const char *end = path + len, *dot;
	const struct rep_val *v = NULL;

	while (obj && path < end) {
		dot = memchr(path, '.', (size_t)(end - path));
		if (!dot)
			dot = end;
		v = NULL;
		for (unsigned i = 0; i < obj->n; i++) {
			if (strlen(obj->fields[i].key) ==
				    (size_t)(dot - path) &&
			    !memcmp(obj->fields[i].key, path, dot - path)) {
				v = &obj->v[i];
				*fp = &obj->fields[i];
				break;
			}
		}
		if (!v)
			return NULL;
		path = dot + (dot < end);
		if (path < end)
			obj = (*fp)->type == REP_OBJECT && v->set ? v->obj
								  : NULL;
	}
	return v;
}

/*
 * A template that names a field the schema lacks is a bug: the tests stop
 * on it; a build without assertions writes "-" rather than crash.
 */
static const struct rep_val *must_find(const struct rep_obj *obj,
				       const char *path, size_t len,
				       const struct rep_field **fp)
{
	static const struct rep_field none = { .key = "", .type = REP_COUNT };
	static const struct rep_val unset;
	const struct rep_val *v = find(obj, path, len, fp);

	assert(v);
	if (v)
		return v;
	*fp = &none;
	return &unset;
}

static bool is_unsigned(enum rep_type t)
{
	return t == REP_COUNT || t == REP_BYTES || t == REP_SECONDS ||
	       t == REP_ENUM || t == REP_FLAGS;
}

/* A number to compare; long double holds every uint64_t exactly. */
static long double num_of(const struct rep_field *f, const struct rep_val *v)
{
	if (!v->set)
		return 0;
	if (is_unsigned(f->type))
		return (long double)v->u;
	if (f->type == REP_INT || f->type == REP_TIME)
		return (long double)v->i;
	if (f->type == REP_PERCENT)
		return v->d;
	if (f->type == REP_BOOL)
		return v->b;
	if (f->type == REP_TABLE)
		return (long double)v->rows->n;
	return 0;
}

static bool truthy(const struct rep_field *f, const struct rep_val *v)
{
	if (!v->set)
		return false;
	switch (f->type) {
	case REP_OBJECT:
	case REP_ENUM:
		return true;
	case REP_STRING:
		return v->s[0] != '\0';
	default:
		return num_of(f, v) != 0;
	}
}

/* One condition term, @len bytes at @t. */
static bool term_holds(const struct rep_obj *obj, const char *t, size_t len)
{
	const struct rep_field *f, *g;
	const struct rep_val *v, *w;
	const char *op, *name;
	bool neg = len && *t == '!';

	if (neg) {
		t++;
		len--;
	}
	op = memchr(t, '<', len);
	if (op) {
		v = must_find(obj, t, (size_t)(op - t), &f);
		w = must_find(obj, op + 1, len - (size_t)(op - t) - 1, &g);
		return neg != (num_of(f, v) < num_of(g, w));
	}
	op = memchr(t, '=', len);
	if (op) {
		v = must_find(obj, t, (size_t)(op - t), &f);
		name = !v->set			? NULL
		       : f->type == REP_ENUM	? enum_name(f, v->u)
		       : f->type == REP_STRING	? v->s
						: NULL;
		return neg !=
		       (name && strlen(name) == len - (size_t)(op - t) - 1 &&
			!memcmp(name, op + 1, strlen(name)));
	}
	v = must_find(obj, t, len, &f);
	return neg != truthy(f, v);
}

static bool holds(const struct rep_obj *obj, const char *when)
{
	const char *amp;

	if (!when)
		return true;
	for (;;) {
		amp = strchr(when, '&');
		if (!term_holds(obj, when, amp ? (size_t)(amp - when)
					       : strlen(when)))
			return false;
		if (!amp)
			return true;
		when = amp + 1;
	}
}

/* @v of @f for a human; @mod is "", "n" or "ago" (@mlen bytes). */
static void put_human(struct rep_out *o, const struct rep_field *f,
		      const struct rep_val *v, const char *mod, size_t mlen)
{
	bool exact = mlen == 1 && *mod == 'n';
	bool ago = mlen == 3 && !memcmp(mod, "ago", 3);
	bool any = false;

	if (f->type == REP_TIME) {
		int64_t t = v->set ? v->i : 0;

		if (ago)
			put_ago(o, t);
		else if (exact)
			rep_out_printf(o, "%" PRId64, t);
		else
			put_time(o, t);
		return;
	}
	if (!v->set) {
		rep_out_str(o, "-");
		return;
	}
	switch (f->type) {
	case REP_BYTES:
		if (!exact) {
			put_bytes(o, v->u);
			break;
		}
		/* fall through */
	case REP_COUNT:
		rep_out_printf(o, "%" PRIu64, v->u);
		break;
	case REP_SECONDS:
		if (exact)
			rep_out_printf(o, "%" PRIu64, v->u);
		else
			put_dur(o, v->u);
		break;
	case REP_INT:
		rep_out_printf(o, "%" PRId64, v->i);
		break;
	case REP_PERCENT:
		rep_out_printf(o, "%.1f%%", v->d);
		break;
	case REP_BOOL:
		rep_out_str(o, v->b ? "yes" : "no");
		break;
	case REP_STRING:
		rep_out_text(o, v->s);
		break;
	case REP_ENUM:
		rep_out_text(o, enum_name(f, v->u));
		break;
	case REP_FLAGS:
		for (unsigned j = 0; j < f->n; j++) {
			if (!(v->u >> j & 1))
				continue;
			rep_out_str(o, any ? "," : "");
			rep_out_text(o, f->names[j]);
			any = true;
		}
		if (!any)
			rep_out_str(o, "-");
		break;
	case REP_TABLE:
		rep_out_printf(o, "%zu", v->rows->n);
		break;
	default:
		rep_out_str(o, "-");
	}
}

/* Expand template @t with the fields of @obj. */
static void put_template(struct rep_out *o, const struct rep_obj *obj,
			 const char *t)
{
	const struct rep_field *f;
	const struct rep_val *v;
	const char *open, *close, *p, *sel, *alt;
	size_t plen;

	while ((open = strchr(t, '{'))) {
		rep_out_add(o, t, (size_t)(open - t));
		close = strchr(open, '}');
		assert(close);
		p = open + 1;
		plen = strcspn(p, ":?}");
		v = must_find(obj, p, plen, &f);
		sel = p + plen;
		if (*sel == '?') {
			/* {path?one|other}: one when the value is 1. */
			alt = memchr(sel, '|', (size_t)(close - sel));
			assert(alt);
			if (v->set && num_of(f, v) == 1)
				rep_out_add(o, sel + 1,
					    (size_t)(alt - sel - 1));
			else
				rep_out_add(o, alt + 1,
					    (size_t)(close - alt - 1));
		} else if (*sel == ':') {
			put_human(o, f, v, sel + 1, (size_t)(close - sel - 1));
		} else {
			put_human(o, f, v, "", 0);
		}
		t = close + 1;
	}
	rep_out_str(o, t);
}

/* @s (@n bytes, @cols columns) padded to @width (< 0: on the right). */
static void put_padded(struct rep_out *o, const char *s, size_t n, int cols,
		       int width)
{
	int pad = (width < 0 ? -width : width) - cols;

	for (int i = 0; width > 0 && i < pad; i++)
		rep_out_add(o, " ", 1);
	rep_out_add(o, s, n);
	for (int i = 0; width < 0 && i < pad; i++)
		rep_out_add(o, " ", 1);
}

/* The row format of @row: the first whose condition holds, or NULL. */
static const struct rep_row_text *row_text(const struct rep_table_text *t,
					   const struct rep_obj *row)
{
	for (unsigned i = 0; i < t->nrows; i++)
		if (holds(row, t->rows[i].when))
			return &t->rows[i];
	return NULL;
}

static void put_table(struct rep_out *o, const struct rep *r,
		      const struct rep_table_text *t)
{
	const struct rep_rows *rows = r->v.rows;
	struct rep_out cell = { 0 };
	const struct rep_row_text *rt;
	const struct rep_field *f;
	int width[16];
	unsigned c;

	assert(t->ncols <= sizeof(width) / sizeof(width[0]));
	if (t->path) {
		const struct rep_val *v =
			must_find(r->v.obj, t->path, strlen(t->path), &f);

		if (f->type != REP_TABLE || !v->set) {
			assert(0);
			return;
		}
		rows = v->rows;
	}
	for (c = 0; c < t->ncols; c++)
		width[c] = t->cols[c].width;
	/* Columns that fit their widest cell: measure first. */
	for (size_t i = 0; i < rows->n; i++) {
		rt = row_text(t, rows->v[i]);
		for (c = 0; rt && c < t->ncols; c++) {
			int w = width[c] < 0 ? -width[c] : width[c], cols;

			if (t->cols[c].fit <= 0)
				continue;
			cell.len = 0;
			put_template(&cell, rows->v[i], rt->cells[c]);
			cols = text_cols(cell.buf, cell.len);
			if (cols > t->cols[c].fit)
				cols = t->cols[c].fit;
			if (cols > w)
				width[c] = width[c] < 0 ? -cols : cols;
		}
	}
	rep_out_begin(o, 'o');
	for (c = 0; c < t->ncols; c++) {
		rep_out_str(o, t->cols[c].sep);
		put_padded(o, t->cols[c].head, strlen(t->cols[c].head),
			   text_cols(t->cols[c].head, strlen(t->cols[c].head)),
			   width[c]);
	}
	rep_out_end(o);
	for (size_t i = 0; i < rows->n; i++) {
		rt = row_text(t, rows->v[i]);
		if (!rt)
			continue;
		rep_out_begin(o, 'o');
		for (c = 0; c < t->ncols; c++) {
			rep_out_str(o, t->cols[c].sep);
			cell.len = 0;
			put_template(&cell, rows->v[i], rt->cells[c]);
			if (cell.err)
				break;
			put_padded(o, cell.buf, cell.len,
				   text_cols(cell.buf, cell.len), width[c]);
		}
		rep_out_end(o);
	}
	if (cell.err && !o->err)
		o->err = cell.err;
	free(cell.buf);
}

void rep_text(struct rep_out *o, const struct rep *r,
	      const struct rep_text *t, unsigned n, int label_w)
{
	const struct rep_obj *top =
		r->root->type == REP_OBJECT ? r->v.obj : NULL;

	for (unsigned i = 0; i < n; i++) {
		if (!holds(top, t[i].when))
			continue;
		if (!t[i].line) {
			put_table(o, r, t[i].table);
			continue;
		}
		rep_out_begin(o, 'o');
		if (t[i].label)
			rep_out_printf(o, "%-*s", label_w, t[i].label);
		put_template(o, top, t[i].line);
		rep_out_end(o);
	}
}
