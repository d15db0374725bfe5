/*
 * scheme.c - protection scheme strings and limits, and the thread-local
 * error text behind ers_last_error().
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erasure_i.h"

/*
 * Thread-local so that concurrent codec users never see each other's
 * reasons, and no lock is needed.
 */
static _Thread_local char ers_err[192];

void ers_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ers_err, sizeof(ers_err), fmt, ap);
	va_end(ap);
}

const char *ers_last_error(void)
{
	return ers_err;
}

int ers_scheme_check(const struct ers_scheme *s)
{
	if (!s) {
		ers_set_error("no scheme");
		return -EINVAL;
	}
	switch (s->kind) {
	case ERS_REPLICATE:
		if (s->k != 1 || s->m < 1 || s->m > ERS_MAX_M) {
			ers_set_error("replicate:r needs 2 <= r <= %d",
				      ERS_MAX_M + 1);
			return -EINVAL;
		}
		return 0;
	case ERS_XOR:
		if (s->k == 0) {
			ers_set_error("xor: k unknown, size it to the group "
				      "with ers_scheme_fit()");
			return -EINVAL;
		}
		if (s->m != 1 || s->k < 1 || s->k > ERS_MAX_K) {
			ers_set_error("xor needs m = 1 and 1 <= k <= %d",
				      ERS_MAX_K);
			return -EINVAL;
		}
		return 0;
	case ERS_RS:
		if (s->k < 1 || s->k > ERS_MAX_K || s->m < 1 ||
		    s->m > ERS_MAX_M) {
			ers_set_error("rs:k+m needs 1 <= k <= %d and "
				      "1 <= m <= %d",
				      ERS_MAX_K, ERS_MAX_M);
			return -EINVAL;
		}
		return 0;
	}
	ers_set_error("unknown scheme kind %d", (int)s->kind);
	return -EINVAL;
}

/*
 * Parse a decimal in [1, 999] at *p, advancing it. Small bound so that no
 * overflow handling is needed; the caller checks the real limits.
 */
static int parse_small(const char **p, int *val)
{
	const char *s = *p;
	int v = 0;
	int digits = 0;

	while (*s >= '0' && *s <= '9' && digits < 4) {
		v = v * 10 + (*s - '0');
		s++;
		digits++;
	}
	if (digits == 0 || digits > 3 || v == 0)
		return -EINVAL;
	*p = s;
	*val = v;
	return 0;
}

int ers_scheme_parse(const char *str, struct ers_scheme *out)
{
	struct ers_scheme s = { 0 };
	const char *p;
	int rc = -EINVAL;

	if (!str || !out) {
		ers_set_error("no scheme string");
		return -EINVAL;
	}
	if (!strcmp(str, "xor")) {
		/* k is the group size - 1, known only to ers_scheme_fit(). */
		*out = (struct ers_scheme){ .kind = ERS_XOR, .k = 0, .m = 1 };
		return 0;
	}
	if (!strncmp(str, "xor:", 4)) {
		p = str + 4;
		s.kind = ERS_XOR;
		s.m = 1;
		rc = parse_small(&p, &s.k);
	} else if (!strncmp(str, "rs:", 3)) {
		p = str + 3;
		s.kind = ERS_RS;
		rc = parse_small(&p, &s.k);
		if (!rc && *p++ == '+')
			rc = parse_small(&p, &s.m);
		else
			rc = -EINVAL;
	} else if (!strncmp(str, "replicate:", 10)) {
		int r = 0;

		p = str + 10;
		s.kind = ERS_REPLICATE;
		s.k = 1;
		rc = parse_small(&p, &r);
		s.m = r - 1;
	} else {
		p = str;
	}
	if (rc || *p != '\0') {
		ers_set_error("bad scheme '%s': want xor, xor:K, rs:K+M or "
			      "replicate:R",
			      str);
		return -EINVAL;
	}
	rc = ers_scheme_check(&s);
	if (rc)
		return rc;
	*out = s;
	return 0;
}

int ers_scheme_format(const struct ers_scheme *s, char *buf, size_t size)
{
	int n;

	if (!s || (!buf && size)) {
		ers_set_error("no scheme or buffer");
		return -EINVAL;
	}
	if (s->kind == ERS_XOR && s->k == 0 && s->m == 1)
		n = snprintf(buf, size, "xor");
	else if (ers_scheme_check(s))
		return -EINVAL;
	else if (s->kind == ERS_XOR)
		n = snprintf(buf, size, "xor:%d", s->k);
	else if (s->kind == ERS_RS)
		n = snprintf(buf, size, "rs:%d+%d", s->k, s->m);
	else
		n = snprintf(buf, size, "replicate:%d", s->m + 1);
	if (n < 0 || (size_t)n >= size) {
		ers_set_error("scheme string needs %d bytes", n + 1);
		return -ENOSPC;
	}
	return n;
}

int ers_scheme_fit(struct ers_scheme *s, int nodes)
{
	struct ers_scheme t;
	int rc;

	if (!s || nodes < 1) {
		ers_set_error("bad group size %d", nodes);
		return -EINVAL;
	}
	t = *s;
	if (t.kind == ERS_XOR && t.k == 0)
		t.k = nodes - 1;
	rc = ers_scheme_check(&t);
	if (rc)
		return rc;
	if (t.kind == ERS_REPLICATE ? t.m + 1 > nodes : t.k + t.m > nodes) {
		ers_set_error("scheme needs %d nodes, group has %d",
			      t.kind == ERS_REPLICATE ? t.m + 1 : t.k + t.m,
			      nodes);
		return -EINVAL;
	}
	*s = t;
	return 0;
}

int ers_check_lost(int k, int m, const int *lost, int nlost,
		   uint8_t lostmask[ERS_MAX_K + ERS_MAX_M])
{
	memset(lostmask, 0, ERS_MAX_K + ERS_MAX_M);
	if (nlost < 0 || (nlost > 0 && !lost)) {
		ers_set_error("bad lost list");
		return -EINVAL;
	}
	if (nlost > m) {
		ers_set_error("%d chunks lost, the code recovers at most %d",
			      nlost, m);
		return -ERANGE;
	}
	for (int i = 0; i < nlost; i++) {
		if (lost[i] < 0 || lost[i] >= k + m) {
			ers_set_error("lost index %d outside 0..%d", lost[i],
				      k + m - 1);
			return -EINVAL;
		}
		if (lostmask[lost[i]]) {
			ers_set_error("lost index %d listed twice", lost[i]);
			return -EINVAL;
		}
		lostmask[lost[i]] = 1;
	}
	return 0;
}
