/*
 * test_report.c - the report model of the control socket (fs/report.c):
 * one small schema filled once and rendered to JSON, Prometheus (text and
 * JSON) and human text, each compared byte for byte with the answer
 * written out by hand; unset fields, templates and conditions, tables
 * that fit their widest cell, hostile strings, and the size bound.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "report.h"

static const char *color_of(unsigned i)
{
	static const char *const n[] = { "red", "green", "blue" };

	return i < 3 ? n[i] : NULL;
}

static const char *const flag_names[] = { "big", "old" };
static const char *const flag_keys[] = { "is_big", "is_old" };

enum { R_NAME, R_SIZE, R_COLOR, R_FLAGS, R_N };

static const struct rep_field row_fields[R_N] = {
	[R_NAME] = REP_FIELD("name", REP_STRING),
	[R_SIZE] = REP_EXPORT("size", REP_BYTES, REP_GAUGE, "t_item_bytes",
		"Bytes of the item."),
	[R_COLOR] = {
		.key = "color",
		.type = REP_ENUM,
		.metric = REP_GAUGE,
		.prom = "t_item_color",
		.help = "1 for the item's color.",
		.label = "color",
		.n = 3,
		.name_of = color_of,
	},
	[R_FLAGS] = {
		.key = "flags",
		.type = REP_FLAGS,
		.metric = REP_GAUGE,
		.prom = "t_item_flag",
		.help = "1 if the item has the flag.",
		.label = "flag",
		.n = 2,
		.names = flag_names,
		.keys = flag_keys,
	},
};

enum { G_OPS, G_PCT, G_N };

static const struct rep_field grp_fields[G_N] = {
	[G_OPS] = REP_EXPORT("ops", REP_COUNT, REP_COUNTER, "t_ops_total",
		"Operations."),
	[G_PCT] = REP_FIELD("pct", REP_PERCENT),
};

enum { T_VERSION, T_WHO, T_PID, T_WHEN, T_UP, T_OK, T_GRP, T_ITEMS, T_N };

static const struct rep_field top_fields[T_N] = {
	[T_VERSION] = {
		.key = "version",
		.type = REP_STRING,
		.metric = REP_INFO,
		.prom = "t_build_info",
		.help = "Version.",
		.label = "version",
	},
	[T_WHO] = REP_FIELD("who", REP_STRING),
	[T_PID] = REP_FIELD("pid", REP_INT),
	[T_WHEN] = REP_EXPORT("when", REP_TIME, REP_GAUGE, "t_when_seconds",
		"Unix time of it, 0 if never."),
	[T_UP] = REP_FIELD("up", REP_SECONDS),
	[T_OK] = REP_EXPORT("ok", REP_BOOL, REP_GAUGE, "t_ok", "1 if ok."),
	[T_GRP] = {
		.key = "grp",
		.type = REP_OBJECT,
		.fields = grp_fields,
		.n = G_N,
	},
	[T_ITEMS] = {
		.key = "items",
		.type = REP_TABLE,
		.label = "item",
		.fields = row_fields,
		.n = R_N,
	},
};

static const struct rep_field top =
	REP_GROUP("top", top_fields, T_N);

/* The report every test starts from; @rows items, hostile names. */
static struct rep *fill(unsigned rows)
{
	static const char *const names[] = { "a\"b\nc", "\xff\x1b[m",
					     "ünï" };
	struct rep *r = rep_new(&top);
	struct rep_obj *t, *g, *row;

	assert_non_null(r);
	t = rep_top(r);
	rep_set_str(t, T_VERSION, "1.2");
	rep_set_int(t, T_PID, -7);
	rep_set_int(t, T_WHEN, 0);
	rep_set_u64(t, T_UP, 3725);
	rep_set_bool(t, T_OK, true);
	g = rep_obj(t, T_GRP);
	rep_set_u64(g, G_OPS, 1);
	rep_set_pct(g, G_PCT, 12.345);
	for (unsigned i = 0; i < rows; i++) {
		row = rep_row(r, t, T_ITEMS);
		assert_non_null(row);
		rep_set_str(row, R_NAME, names[i % 3]);
		rep_set_u64(row, R_SIZE, (uint64_t)1536 << (10 * i));
		rep_set_u64(row, R_COLOR, i % 3);
		rep_set_u64(row, R_FLAGS, i);
	}
	assert_int_equal(rep_err(r), 0);
	return r;
}

static char *take(struct rep_out *o)
{
	assert_int_equal(o->err, 0);
	rep_out_add(o, "", 1);
	return o->buf;
}

static void test_json(void **state)
{
	struct rep_out o = { 0 };
	struct rep *r = fill(3);
	char *a;

	rep_json(&o, r);
	a = take(&o);
	assert_string_equal(
		a,
		"o {\"version\":\"1.2\",\"who\":null,\"pid\":-7,\"when\":null,"
		"\"up\":3725,\"ok\":true,\"grp\":{\"ops\":1,\"pct\":12.3},"
		"\"items\":["
		"{\"name\":\"a\\\"b\\nc\",\"size\":1536,\"color\":\"red\","
		"\"is_big\":false,\"is_old\":false},"
		"{\"name\":\"\\ufffd\\u001b[m\",\"size\":1572864,"
		"\"color\":\"green\",\"is_big\":true,\"is_old\":false},"
		"{\"name\":\"ünï\",\"size\":1610612736,\"color\":\"blue\","
		"\"is_big\":false,\"is_old\":true}]}\n");
	free(a);
	rep_free(r);
}

static void test_prom(void **state)
{
	struct rep_out o = { 0 };
	struct rep *r = fill(2);
	char *a;

	rep_prom(&o, r, false);
	a = take(&o);
	assert_string_equal(
		a,
		"o # HELP t_build_info Version.\n"
		"o # TYPE t_build_info gauge\n"
		"o t_build_info{version=\"1.2\"} 1\n"
		"o # HELP t_when_seconds Unix time of it, 0 if never.\n"
		"o # TYPE t_when_seconds gauge\n"
		"o t_when_seconds 0\n"
		"o # HELP t_ok 1 if ok.\n"
		"o # TYPE t_ok gauge\n"
		"o t_ok 1\n"
		"o # HELP t_ops_total Operations.\n"
		"o # TYPE t_ops_total counter\n"
		"o t_ops_total 1\n"
		"o # HELP t_item_bytes Bytes of the item.\n"
		"o # TYPE t_item_bytes gauge\n"
		"o t_item_bytes{item=\"a\\\"b\\nc\"} 1536\n"
		"o t_item_bytes{item=\"\xef\xbf\xbd\xef\xbf\xbd[m\"} 1572864\n"
		"o # HELP t_item_color 1 for the item's color.\n"
		"o # TYPE t_item_color gauge\n"
		"o t_item_color{item=\"a\\\"b\\nc\",color=\"red\"} 1\n"
		"o t_item_color{item=\"a\\\"b\\nc\",color=\"green\"} 0\n"
		"o t_item_color{item=\"a\\\"b\\nc\",color=\"blue\"} 0\n"
		"o t_item_color{item=\"\xef\xbf\xbd\xef\xbf\xbd[m\","
		"color=\"red\"} 0\n"
		"o t_item_color{item=\"\xef\xbf\xbd\xef\xbf\xbd[m\","
		"color=\"green\"} 1\n"
		"o t_item_color{item=\"\xef\xbf\xbd\xef\xbf\xbd[m\","
		"color=\"blue\"} 0\n"
		"o # HELP t_item_flag 1 if the item has the flag.\n"
		"o # TYPE t_item_flag gauge\n"
		"o t_item_flag{item=\"a\\\"b\\nc\",flag=\"big\"} 0\n"
		"o t_item_flag{item=\"a\\\"b\\nc\",flag=\"old\"} 0\n"
		"o t_item_flag{item=\"\xef\xbf\xbd\xef\xbf\xbd[m\","
		"flag=\"big\"} 1\n"
		"o t_item_flag{item=\"\xef\xbf\xbd\xef\xbf\xbd[m\","
		"flag=\"old\"} 0\n");
	free(a);

	memset(&o, 0, sizeof(o));
	rep_prom(&o, r, true);
	a = take(&o);
	assert_string_equal(
		a,
		"o {\"t_build_info\":[{\"labels\":{\"version\":\"1.2\"},"
		"\"value\":1}],\"t_when_seconds\":0,\"t_ok\":1,"
		"\"t_ops_total\":1,"
		"\"t_item_bytes\":[{\"labels\":{\"item\":\"a\\\"b\\nc\"},"
		"\"value\":1536},{\"labels\":{\"item\":\"\\ufffd\\u001b[m\"},"
		"\"value\":1572864}],"
		"\"t_item_color\":["
		"{\"labels\":{\"item\":\"a\\\"b\\nc\",\"color\":\"red\"},"
		"\"value\":1},"
		"{\"labels\":{\"item\":\"a\\\"b\\nc\",\"color\":\"green\"},"
		"\"value\":0},"
		"{\"labels\":{\"item\":\"a\\\"b\\nc\",\"color\":\"blue\"},"
		"\"value\":0},"
		"{\"labels\":{\"item\":\"\\ufffd\\u001b[m\",\"color\":\"red\"},"
		"\"value\":0},"
		"{\"labels\":{\"item\":\"\\ufffd\\u001b[m\","
		"\"color\":\"green\"},\"value\":1},"
		"{\"labels\":{\"item\":\"\\ufffd\\u001b[m\","
		"\"color\":\"blue\"},\"value\":0}],"
		"\"t_item_flag\":["
		"{\"labels\":{\"item\":\"a\\\"b\\nc\",\"flag\":\"big\"},"
		"\"value\":0},"
		"{\"labels\":{\"item\":\"a\\\"b\\nc\",\"flag\":\"old\"},"
		"\"value\":0},"
		"{\"labels\":{\"item\":\"\\ufffd\\u001b[m\",\"flag\":\"big\"},"
		"\"value\":1},"
		"{\"labels\":{\"item\":\"\\ufffd\\u001b[m\",\"flag\":\"old\"},"
		"\"value\":0}]}\n");
	free(a);
	rep_free(r);
}

static const struct rep_col cols[] = {
	{ "", "NAME", -4, 8 },
	{ " ", "SIZE", 10, 0 },
	{ "  ", "COLOR", -6, 0 },
	{ "  ", "FLAGS", 0, 0 },
};

static const struct rep_row_text rows_text[] = {
	{ "color=blue",
	  (const char *const[]){ "{name}", "{size:n}", "BLUE", "{flags}" } },
	{ NULL,
	  (const char *const[]){ "{name}", "{size}", "{color}", "{flags}" } },
};

static const struct rep_table_text table = { "items", cols, 4, rows_text,
					     2 };

static const struct rep_text text[] = {
	{ NULL, "version", "v{version}, pid {pid}, who {who}", NULL },
	{ "ok&grp.ops", "ops", "{grp.ops} op{grp.ops?|s} ({grp.pct})", NULL },
	{ "!ok", "never", "shown when not ok", NULL },
	{ "grp.ops<up&!when", "", "up {up} ({up:n} s), when {when}", NULL },
	{ "up<grp.ops", "", "never shown", NULL },
	{ "!items", NULL, "no items", NULL },
	{ "items", NULL, NULL, &table },
};

static void test_text(void **state)
{
	struct rep_out o = { 0 };
	struct rep *r = fill(3);
	char *a;

	rep_text(&o, r, text, sizeof(text) / sizeof(text[0]), 8);
	a = take(&o);
	/* "\xff\x1b[m" escaped is 10 columns: the NAME column fits 8. */
	assert_string_equal(a, "o version v1.2, pid -7, who -\n"
			       "o ops     1 op (12.3%)\n"
			       "o         up 1h 02m 05s (3725 s), when never\n"
			       "o NAME           SIZE  COLOR   FLAGS\n"
			       "o a\"b\\nc      1.5 KiB  red     -\n"
			       "o \\xff\\x1b[m    1.5 MiB  green   big\n"
			       "o ünï      1610612736  BLUE    old\n");
	free(a);
	rep_free(r);

	/* No rows: the other line; two ops: the plural. */
	r = fill(0);
	rep_set_u64(rep_obj(rep_top(r), T_GRP), G_OPS, 2);
	memset(&o, 0, sizeof(o));
	rep_text(&o, r, text, sizeof(text) / sizeof(text[0]), 8);
	a = take(&o);
	assert_non_null(strstr(a, "o ops     2 ops (12.3%)\n"));
	assert_non_null(strstr(a, "\no no items\n"));
	assert_null(strstr(a, "NAME"));
	free(a);
	rep_free(r);
}

/* A report that would not fit in an answer stops growing, and says so. */
static void test_too_big(void **state)
{
	struct rep *r = rep_new(&top);
	size_t n = 1u << 20;
	char *big = malloc(n);
	unsigned i;

	assert_non_null(r);
	assert_non_null(big);
	memset(big, 'x', n - 1);
	big[n - 1] = '\0';
	for (i = 0; i < 100 && !rep_err(r); i++)
		rep_set_str(rep_row(r, rep_top(r), T_ITEMS), R_NAME, big);
	assert_int_equal(rep_err(r), -EFBIG);
	assert_true(i > 32 && i <= 64);
	/* Once failed, nothing more is added. */
	assert_null(rep_row(r, rep_top(r), T_ITEMS));
	rep_free(r);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_prom),
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_too_big),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
