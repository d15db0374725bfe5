/*
 * report.h - an answer of the control socket as data, and its renderers.
 *
 * A command does not print: it fills a report once from the engine's
 * reporting calls, and the caller's choice of format renders it.  (Ceph's
 * admin socket Formatter is the idea; this is our own, smaller code.)
 *
 * A report is a tree of named, typed fields.  Its schema is static tables
 * of struct rep_field: each field says what it is (a count, bytes, a time,
 * a state out of a fixed set...), its JSON key, and, when it is exported,
 * its Prometheus family, type and help text.  Values are filled by index
 * into those tables.  Three renderers walk schema and values:
 *
 *   rep_json()    one JSON value; every field, under its key
 *   rep_prom()    Prometheus text exposition 0.0.4 (or, with json, the
 *                 same families as one JSON object); exported fields only
 *   rep_text()    human text, laid out by a struct rep_text template that
 *                 names fields: the template says where a field goes, the
 *                 field's type says how it is written ("1.5 GiB", "3m 05s")
 *
 * Everything is written into a struct rep_out: tagged lines for the
 * control socket's framing (docs/protocol.md), in which no data can break
 * a line.  Nothing here locks; a report belongs to one thread.
 */
#ifndef RFT_REPORT_H
#define RFT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- answer buffer ------------------------------------------------------ */

#define REP_OUT_MAX (64u << 20) /* one answer; more is -EFBIG */

/*
 * An answer being built: lines "TAG TEXT\n", each opened by
 * rep_out_begin() and ended by rep_out_end().  Only rep_out_end() writes
 * '\n'; rep_out_printf() turns newlines into blanks and rep_out_text()
 * escapes them.  Zero-initialise; free(o->buf) when done.  After a failed
 * allocation or REP_OUT_MAX, @err is -ENOMEM or -EFBIG and nothing more is
 * added.
 */
struct rep_out {
	char *buf;
	size_t len, cap;
	int err;
};

void rep_out_add(struct rep_out *o, const void *p, size_t n);
void rep_out_str(struct rep_out *o, const char *s);
void rep_out_printf(struct rep_out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void rep_out_begin(struct rep_out *o, char tag);
void rep_out_end(struct rep_out *o);
/* One whole line: @tag, the formatted text, newline. */
void rep_out_line(struct rep_out *o, char tag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * @s (NULL: "") for a human: backslash, control characters (C0, DEL, C1),
 * U+2028/U+2029 and bytes that are not UTF-8 as C escapes (\\ \n \t \r
 * \xHH \u2028), so that a file name can break neither a line nor the
 * terminal.
 */
void rep_out_text(struct rep_out *o, const char *s);

/* A JSON string with its quotes; bytes that are not UTF-8 become U+FFFD. */
void rep_out_json(struct rep_out *o, const char *s);

/* --- schema ------------------------------------------------------------- */

enum rep_type {
	REP_OBJECT,  /* the fields in .fields: a JSON object */
	REP_TABLE,   /* rows, each with the fields in .fields: a JSON array */
	REP_COUNT,   /* unsigned integer */
	REP_INT,     /* signed integer (a pid, an mtime) */
	REP_BYTES,   /* unsigned byte count; text: "1.5 GiB" */
	REP_SECONDS, /* unsigned duration; text: "1h 02m 03s" */
	REP_TIME,    /* Unix seconds, 0: never; JSON null, text "never" */
	REP_PERCENT, /* double; JSON 25.0, text "25.0%" */
	REP_BOOL,
	REP_STRING,
	REP_ENUM,  /* one of .n states named by .name_of(); text and JSON
		      the name, Prometheus one sample per state, 1 for it */
	REP_FLAGS, /* a set of .n flags, bit i named .names[i]: JSON one
		      bool per flag under .keys[i], text "a,b" or "-",
		      Prometheus one sample per flag */
};

enum rep_metric {
	REP_NOT_EXPORTED,
	REP_GAUGE,
	REP_COUNTER,
	REP_INFO, /* a REP_STRING exported as gauge .prom{.label="value"} 1 */
};

struct rep_field {
	const char *key; /* JSON key; templates name the field by it */
	enum rep_type type;
	enum rep_metric metric;
	const char *prom; /* Prometheus family name, units in it */
	const char *help; /* its # HELP text */
	/*
	 * Prometheus label: REP_TABLE, the label that names a row (its value
	 * is the row's first field, a REP_STRING); REP_ENUM, REP_FLAGS and
	 * REP_INFO, the label that carries the state, flag or string.
	 */
	const char *label;
	const struct rep_field *fields; /* REP_OBJECT, REP_TABLE */
	unsigned n; /* entries in .fields, or states or flags */
	const char *(*name_of)(unsigned state); /* REP_ENUM */
	const char *const *names;		/* REP_FLAGS: words */
	const char *const *keys;		/* REP_FLAGS: JSON keys */
};

/*
 * Shorthands for struct rep_field: a field that is reported, one also
 * exported as a metric, and an object of @n_ fields.
 */
#define REP_FIELD(key_, type_) { .key = (key_), .type = (type_) }
#define REP_EXPORT(key_, type_, metric_, prom_, help_)                         \
	{                                                                      \
		.key = (key_), .type = (type_), .metric = (metric_),           \
		.prom = (prom_), .help = (help_)                               \
	}
#define REP_GROUP(key_, fields_, n_)                                           \
	{                                                                      \
		.key = (key_), .type = REP_OBJECT, .fields = (fields_),        \
		.n = (n_)                                                      \
	}

/* --- values ------------------------------------------------------------- */

struct rep;	/* a report */
struct rep_obj; /* the values of one REP_OBJECT, or of one table row */

/*
 * A report of schema @root (a REP_OBJECT or a REP_TABLE; the schema must
 * outlive the report) with every field unset: JSON null, text "-".
 * Returns NULL when out of memory.  rep_free(NULL) is a no-op.
 */
struct rep *rep_new(const struct rep_field *root);
void rep_free(struct rep *r);

/*
 * -ENOMEM once a value could not be stored, -EFBIG once the report holds
 * more than REP_OUT_MAX bytes (an answer that big could not be sent); 0
 * otherwise.  Setters called after that do nothing.
 */
int rep_err(const struct rep *r);

/* The values of a REP_OBJECT root. */
struct rep_obj *rep_top(struct rep *r);

/* The values of object field @i of @o. */
struct rep_obj *rep_obj(struct rep_obj *o, unsigned i);

/*
 * Append a row to table field @i of @o (@o NULL: to a REP_TABLE root).
 * Returns NULL when out of memory or too big (rep_err() says which).
 */
struct rep_obj *rep_row(struct rep *r, struct rep_obj *o, unsigned i);

/*
 * Set field @i of @o.  The setter must suit the field's type:
 * rep_set_u64 for REP_COUNT, REP_BYTES, REP_SECONDS, REP_ENUM (the state)
 * and REP_FLAGS (bit i: flag i); rep_set_int for REP_INT and REP_TIME;
 * rep_set_str copies @s (NULL leaves the field unset).
 */
void rep_set_u64(struct rep_obj *o, unsigned i, uint64_t v);
void rep_set_int(struct rep_obj *o, unsigned i, int64_t v);
void rep_set_pct(struct rep_obj *o, unsigned i, double v);
void rep_set_bool(struct rep_obj *o, unsigned i, bool v);
void rep_set_str(struct rep_obj *o, unsigned i, const char *s);

/* --- renderers ---------------------------------------------------------- */

/* The whole report as one 'o' line holding one JSON value. */
void rep_json(struct rep_out *o, const struct rep *r);

/*
 * Every exported field as Prometheus families, in schema order, each
 * "# HELP", "# TYPE" and its samples on 'o' lines.  A table's fields
 * become families with one sample per row, labelled by the table's label.
 * Unset values are 0.  With @json: one 'o' line holding one object, a
 * family without labels as "name": value, one with labels as "name":
 * [{"labels": {...}, "value": v}, ...].
 */
void rep_prom(struct rep_out *o, const struct rep *r, bool json);

/*
 * Text templates.  In @line or a cell, "{path}" is the field at path
 * (keys joined by '.', from the report's root object or from the row)
 * written for a human by its type; "{path:n}" an exact number (bytes too);
 * "{path:ago}" a time as "3m 05s ago"; "{path?one|other}" the word one
 * when the value is 1 (or true), else other.  Other text is copied.
 *
 * A @when condition is terms joined by '&', each "path" (set, and not 0,
 * false, "" or an empty table), "!path", "path<path" (numbers) or
 * "path=word" (a state, string or text).  NULL: always.
 */
struct rep_col {
	const char *sep;  /* before the column */
	const char *head; /* heading */
	int width;	  /* pad cells to this many columns, < 0: on the
			     right (left-aligned), 0: no padding */
	int fit;	  /* > 0: widen to the widest cell, up to this */
};

struct rep_row_text {
	const char *when;	  /* on the row; NULL: always */
	const char *const *cells; /* one template per column */
};

struct rep_table_text {
	const char *path; /* the table; NULL: the report's root */
	const struct rep_col *cols;
	unsigned ncols;
	const struct rep_row_text *rows; /* first one whose when holds */
	unsigned nrows;
};

struct rep_text {
	const char *when;
	const char *label; /* padded to the label width; NULL: none */
	const char *line;  /* a template; NULL: .table, a heading and rows */
	const struct rep_table_text *table;
};

/* Lines @t[0..@n) that hold, as 'o' lines; labels padded to @label_w. */
void rep_text(struct rep_out *o, const struct rep *r,
	      const struct rep_text *t, unsigned n, int label_w);

#endif /* RFT_REPORT_H */
