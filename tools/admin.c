/*
 * admin.c - reftfs-admin: the command line side of the control socket.
 *
 * Thin on purpose: find the daemon's socket, send one request line, relay
 * the tagged answer lines (docs/protocol.md, "Control socket") and exit
 * with the code the daemon chose.  The daemon renders text, JSON and
 * metrics; the only thing drawn here is flush progress.  Of the daemon,
 * only rfs_ctl_default_path() (fs/ctl_path.c) is linked: tools talk to
 * reftfsd through the socket and nothing else.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <mntent.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_path.h"
#include "rft_clock.h"

#ifndef RFT_VERSION
#define RFT_VERSION "unknown"
#endif

#define ADM_MAX_LINE 4096	/* request line, '\n' included */
#define ADM_IDLE_MS 30000	/* daemon silence we give up after */
#define ADM_MAX_ANSWER (128u << 20) /* one answer line */
#define ADM_PLAIN_MS 1000	/* progress lines when not on a terminal */
#define ADM_BAR 24		/* progress bar width */
#define ADM_FSTYPE "fuse.reftfs"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2 };

static const char prog[] = "reftfs-admin";
static volatile sig_atomic_t interrupted;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [-m MOUNTPOINT | -s SOCKET] [--json] COMMAND "
		"[ARGS]\n"
		"\n"
		"Commands (answered by reftfsd):\n"
		"  status [--json]          memory, contents, persist tier, "
		"counters,\n"
		"                           checkpoints\n"
		"  ls [PATH] [--json]       state, size, tier and checksum of "
		"the files\n"
		"                           under PATH (relative to the mount "
		"root)\n"
		"  flush [--wait] [--json]  write back everything sealed now; "
		"--wait\n"
		"                           shows progress until it is done\n"
		"  group [--json]           the sharding group: members, their "
		"state,\n"
		"                           incarnation, links, protection, "
		"counters\n"
		"  group force-remove NODE...\n"
		"                           after a lost majority: end the "
		"lost nodes'\n"
		"                           votes, so that the survivors go "
		"on and\n"
		"                           replacements can join (on the "
		"survivor\n"
		"                           whose log is furthest along)\n"
		"  placement PATH [--json]  each piece of a file: size, "
		"checksum, where it\n"
		"                           is here, the nodes that hold it\n"
		"  verify [PATH] [--repair] [--json]\n"
		"                           recompute the checksums of the "
		"files under\n"
		"                           PATH, here and on the nodes with "
		"copies;\n"
		"                           --repair (on a file's owner) puts "
		"bad pieces\n"
		"                           right from a good copy (exit 1 "
		"when a piece\n"
		"                           stays bad or a copy could not be "
		"checked)\n"
		"  protect [--wait] [--json]\n"
		"                           copies of this node's files on "
		"peers;\n"
		"                           --wait until every sealed file is "
		"protected\n"
		"                           (exit 1 with the reason when it "
		"cannot be)\n"
		"  rebuild [--wait] [--json]\n"
		"                           a replacement bringing back its "
		"node's files;\n"
		"                           --wait until it is done\n"
		"  checkpoints [--json]     each checkpoint's files by state; "
		"the newest\n"
		"                           wholly protected and wholly "
		"persisted\n"
		"  wait PATH --sealed|--protected|--persisted [--timeout S]\n"
		"                           until every file under PATH (in "
		"the mount,\n"
		"                           or from its root) is so; exit 0, "
		"1 once one\n"
		"                           is lost, 3 at the timeout\n"
		"  advise [--mtbf HOURS] [--json]\n"
		"                           from this node's recent "
		"checkpoints: the\n"
		"                           interval that loses the least "
		"time (the job\n"
		"                           failing every HOURS, 24 unless "
		"given),\n"
		"                           --persist-every, the odds of a "
		"loss\n"
		"  metrics [--json]         Prometheus text exposition\n"
		"  version [--json]         versions of %s and reftfsd\n"
		"\n"
		"Commands (no reftfsd asked):\n"
		"  config --check FILE      check a config file (reftfs.conf(5))\n"
		"                           with reftfsd's own parser: exit 0,\n"
		"                           or 2 with FILE:LINE and the reason\n"
		"\n"
		"Options:\n"
		"  -m, --mount MOUNTPOINT   the reftfs to ask (default: the "
		"only one\n"
		"                           mounted)\n"
		"  -s, --socket SOCKET      control socket path (default: "
		"derived from\n"
		"                           the mount point)\n"
		"      --json               machine-readable output, also "
		"after COMMAND\n"
		"  -h, --help               this text\n"
		"\n"
		"Exit status: 0 done, 1 failed or reftfsd unreachable, 2 bad "
		"usage.\n",
		prog, prog);
}

static void usage_err(const char *msg)
{
	fprintf(stderr, "%s: %s\n\n", prog, msg);
	usage(stderr);
}

#ifndef RFT_REFTFSD
#define RFT_REFTFSD "/usr/local/sbin/reftfsd"
#endif

/*
 * config --check FILE: the daemon's binary checks it (reftfsd --config
 * FILE --check), so that the file is read by the one parser that will
 * read it; no running daemon is asked.  $REFTFSD names another binary.
 * Its exit status: 0, or 2 with FILE:LINE and the reason.
 */
static int config_check(int argc, char **argv)
{
	const char *bin = getenv("REFTFSD");

	if (argc != 2 || strcmp(argv[0], "--check")) {
		usage_err("config --check FILE");
		return EXIT_USAGE;
	}
	if (!bin || !*bin)
		bin = RFT_REFTFSD;
	execl(bin, "reftfsd", "--config", argv[1], "--check", (char *)NULL);
	fprintf(stderr, "%s: cannot run %s: %s\n", prog, bin, strerror(errno));
	return EXIT_FAIL;
}

static const char *fmt_bytes(char *buf, size_t size, uint64_t v)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB",
					    "TiB", "PiB", "EiB" };
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

/* --- finding the daemon ------------------------------------------------- */

struct mnt {
	char *dir;
	long uid; /* user_id= of the FUSE mount, -1 if not shown */
};

struct mnts {
	struct mnt *v;
	size_t n;
};

static void mnts_release(struct mnts *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->v[i].dir);
	free(m->v);
}

/* Every reftfs in /proc/self/mounts (fstype fuse.reftfs), each dir once. */
static int mnts_read(struct mnts *m)
{
	char buf[16384];
	struct mntent me;
	FILE *f;
	size_t i;

	m->v = NULL;
	m->n = 0;
	f = setmntent("/proc/self/mounts", "r");
	if (!f)
		return -errno;
	while (getmntent_r(f, &me, buf, sizeof(buf))) {
		const char *u;
		struct mnt *v;

		if (strcmp(me.mnt_type, ADM_FSTYPE))
			continue;
		for (i = 0; i < m->n; i++)
			if (!strcmp(m->v[i].dir, me.mnt_dir))
				break;
		if (i < m->n)
			continue;
		v = realloc(m->v, (m->n + 1) * sizeof(*v));
		if (!v)
			goto nomem;
		m->v = v;
		v = &m->v[m->n];
		v->dir = strdup(me.mnt_dir);
		if (!v->dir)
			goto nomem;
		u = hasmntopt(&me, "user_id");
		v->uid = u && u[7] == '=' ? strtol(u + 8, NULL, 10) : -1;
		m->n++;
	}
	endmntent(f);
	return 0;
nomem:
	endmntent(f);
	return -ENOMEM;
}

static const struct mnt *mnts_find(const struct mnts *m, const char *dir)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		if (!strcmp(m->v[i].dir, dir))
			return &m->v[i];
	return NULL;
}

/*
 * @in made absolute without touching the filesystem ("." and ".." by
 * name), so that a mount whose daemon hangs or died is still found.
 */
static int abs_path(const char *in, char *out, size_t size)
{
	char tmp[2 * PATH_MAX], cwd[PATH_MAX];
	const char *p = tmp, *s;
	size_t len = 0, n;

	if (in[0] != '/') {
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		snprintf(tmp, sizeof(tmp), "%s/%s", cwd, in);
	} else {
		snprintf(tmp, sizeof(tmp), "%s", in);
	}
	while (*p) {
		while (*p == '/')
			p++;
		for (s = p; *p && *p != '/'; p++)
			;
		n = (size_t)(p - s);
		if (!n || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			while (len && out[len] != '/')
				len--;
			continue;
		}
		if (len + 1 + n + 1 > size)
			return -ENAMETOOLONG;
		out[len++] = '/';
		memcpy(out + len, s, n);
		len += n;
		out[len] = '\0';
	}
	if (!len)
		out[len++] = '/';
	out[len] = '\0';
	return 0;
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/*
 * The default socket path depends on who computes it (root, $XDG_RUNTIME_DIR
 * or not).  When it is absent, try the other places the daemon of this
 * mount may have used (sudo, a shell without a login session); the file
 * name, a hash of the mount point, is the same everywhere.
 */
static int connect_default(const char *sock, const struct mnt *m)
{
	const char *base = strrchr(sock, '/'), *xdg = getenv("XDG_RUNTIME_DIR");
	long uids[2] = { m && m->uid >= 0 ? m->uid : -1, (long)geteuid() };
	char alt[PATH_MAX];
	int fd = connect_to(sock), alt_fd, i, k;

	if (fd != -ENOENT || !base)
		return fd;
	for (i = 0; i < 2; i++) {
		long u = uids[i];

		if (u < 0 || (i == 1 && u == uids[0]))
			continue;
		for (k = 0; k < 4; k++) {
			if (k == 0 && u == 0)
				snprintf(alt, sizeof(alt), "/run/reftfs%s",
					 base);
			else if (k == 1)
				snprintf(alt, sizeof(alt),
					 "/run/user/%ld/reftfs%s", u, base);
			else if (k == 2)
				snprintf(alt, sizeof(alt), "/tmp/reftfs-%ld%s",
					 u, base);
			else if (k == 3 && xdg && *xdg && i == 1)
				snprintf(alt, sizeof(alt), "%s/reftfs%s", xdg,
					 base);
			else
				continue;
			if (!strcmp(alt, sock))
				continue;
			alt_fd = connect_to(alt);
			if (alt_fd >= 0)
				return alt_fd;
		}
	}
	return -ENOENT;
}

/* --- the request -------------------------------------------------------- */

static bool needs_quotes(const char *a)
{
	const unsigned char *p = (const unsigned char *)a;

	if (!*p)
		return true;
	for (; *p; p++)
		if (*p <= ' ' || *p == 0x7f || *p == '"' || *p == '\\')
			return true;
	return false;
}

static int put(char *buf, size_t size, size_t *len, const char *s, size_t n)
{
	if (n >= size - *len)
		return -E2BIG;
	memcpy(buf + *len, s, n);
	*len += n;
	buf[*len] = '\0';
	return 0;
}

/*
 * Append @a to @buf (@size bytes, @len used) as one request word: quoted
 * with escapes when it holds blanks, quotes, backslashes or control
 * characters (docs/protocol.md).
 */
static int add_word(char *buf, size_t size, size_t *len, const char *a)
{
	const unsigned char *p = (const unsigned char *)a;
	bool q = needs_quotes(a);
	char esc[8];
	int rc = 0;

	if (*len)
		rc = put(buf, size, len, " ", 1);
	if (!rc && q)
		rc = put(buf, size, len, "\"", 1);
	for (; !rc && *p; p++) {
		if (!q || (*p >= ' ' && *p != 0x7f && *p != '"' && *p != '\\'))
			snprintf(esc, sizeof(esc), "%c", *p);
		else if (*p == '\n')
			snprintf(esc, sizeof(esc), "\\n");
		else if (*p == '\t')
			snprintf(esc, sizeof(esc), "\\t");
		else if (*p == '"' || *p == '\\')
			snprintf(esc, sizeof(esc), "\\%c", *p);
		else
			snprintf(esc, sizeof(esc), "\\x%02x", *p);
		rc = put(buf, size, len, esc, strlen(esc));
	}
	if (!rc && q)
		rc = put(buf, size, len, "\"", 1);
	return rc;
}

static int send_all(int fd, const char *p, size_t n)
{
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* --- the answer --------------------------------------------------------- */

struct reader {
	int fd;
	char *buf;
	size_t start, len, cap;
};

/*
 * Next '\n'-ended line, NUL-terminated in place.  Returns 1, 0 at EOF,
 * -ETIMEDOUT after ADM_IDLE_MS of silence, -EINTR on Ctrl-C, or -errno.
 */
static int read_line(struct reader *r, char **line)
{
	struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
	char *nl, *p;
	ssize_t n;
	int rc;

	for (;;) {
		nl = r->len > r->start ? memchr(r->buf + r->start, '\n',
						r->len - r->start)
				      : NULL;
		if (nl) {
			*nl = '\0';
			*line = r->buf + r->start;
			r->start = (size_t)(nl - r->buf) + 1;
			return 1;
		}
		if (r->start) {
			memmove(r->buf, r->buf + r->start, r->len - r->start);
			r->len -= r->start;
			r->start = 0;
		}
		if (r->len == r->cap) {
			if (r->cap >= ADM_MAX_ANSWER)
				return -EFBIG;
			p = realloc(r->buf, r->cap ? 2 * r->cap : 65536);
			if (!p)
				return -ENOMEM;
			r->buf = p;
			r->cap = r->cap ? 2 * r->cap : 65536;
		}
		rc = poll(&pfd, 1, ADM_IDLE_MS);
		if (interrupted)
			return -EINTR;
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -errno;
		if (rc == 0)
			return -ETIMEDOUT;
		n = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		r->len += (size_t)n;
	}
}

/*
 * Progress of flush, protect or rebuild --wait, drawn from "p" records:
 * "FILES_DONE FILES_TOTAL BYTES_DONE BYTES_TOTAL [WHAT]" (WHAT: flush when
 * absent, as older daemons send it).
 */
struct progress {
	char what[16];
	bool tty;	/* redraw one line with \r */
	bool drawn;	/* tty: a bar is on the current line */
	bool have;	/* a record arrived */
	bool shown;	/* plain: the newest record was printed */
	uint64_t shown_at;
	uint64_t fd, ft, bd, bt;
	uint64_t shown_v[4]; /* plain: what the last line said */
};

static void progress_plain(struct progress *pg)
{
	const uint64_t v[4] = { pg->fd, pg->ft, pg->bd, pg->bt };
	char b1[32], b2[32];

	/* Say nothing twice: a quick flush sends the same record twice. */
	if (pg->shown_at && !memcmp(v, pg->shown_v, sizeof(v))) {
		pg->shown = true;
		return;
	}
	memcpy(pg->shown_v, v, sizeof(v));
	if (!pg->bt && !pg->bd) /* wait: files only */
		printf("%s: %" PRIu64 "/%" PRIu64 " files\n", pg->what,
		       pg->fd, pg->ft);
	else if (pg->bt)
		printf("%s: %" PRIu64 "/%" PRIu64 " files, %s/%s\n", pg->what,
		       pg->fd, pg->ft, fmt_bytes(b1, sizeof(b1), pg->bd),
		       fmt_bytes(b2, sizeof(b2), pg->bt));
	else
		printf("%s: %" PRIu64 "/%" PRIu64 " files, %s\n", pg->what,
		       pg->fd, pg->ft, fmt_bytes(b1, sizeof(b1), pg->bd));
	fflush(stdout);
	pg->shown = true;
	pg->shown_at = rft_now_ms();
}

static void progress_bar(struct progress *pg)
{
	char bar[ADM_BAR + 1], b1[32], b2[32];
	unsigned pct, fill, i;

	if (pg->bt)
		pct = (unsigned)(pg->bd >= pg->bt ? 100
				 : (double)pg->bd * 100 / (double)pg->bt);
	else if (pg->ft)
		pct =
		    (unsigned)(pg->fd >= pg->ft ? 100 : pg->fd * 100 / pg->ft);
	else
		pct = 100;
	fill = pct * ADM_BAR / 100;
	for (i = 0; i < ADM_BAR; i++)
		bar[i] = i < fill ? '#' : '-';
	bar[ADM_BAR] = '\0';
	if (!pg->bt && !pg->bd) /* wait: files only */
		printf("\r%s %3u%% [%s] %" PRIu64 "/%" PRIu64 " files\033[K",
		       pg->what, pct, bar, pg->fd, pg->ft);
	else
		printf("\r%s %3u%% [%s] %s/%s, %" PRIu64 "/%" PRIu64
		       " files\033[K",
		       pg->what, pct, bar, fmt_bytes(b1, sizeof(b1), pg->bd),
		       fmt_bytes(b2, sizeof(b2), pg->bt), pg->fd, pg->ft);
	fflush(stdout);
	pg->drawn = true;
}

static void progress_record(struct progress *pg, const char *text)
{
	uint64_t v[4];
	char what[sizeof(pg->what)] = "flush";
	int n = sscanf(text,
		       "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %15s",
		       &v[0], &v[1], &v[2], &v[3], what);

	if (n != 4 && n != 5)
		return; /* not for us: a newer daemon's record */
	memcpy(pg->what, what, sizeof(pg->what));
	pg->fd = v[0];
	pg->ft = v[1];
	pg->bd = v[2];
	pg->bt = v[3];
	pg->have = true;
	pg->shown = false;
	if (pg->tty)
		progress_bar(pg);
	else if (!pg->shown_at || rft_now_ms() - pg->shown_at >= ADM_PLAIN_MS)
		progress_plain(pg);
}

/* Before any other output: end the bar's line, or print the last record. */
static void progress_end(struct progress *pg)
{
	if (pg->tty && pg->drawn) {
		putchar('\n');
		fflush(stdout);
		pg->drawn = false;
	} else if (!pg->tty && pg->have && !pg->shown) {
		progress_plain(pg);
	}
}

/* Relay the answer on @fd; returns the exit code. */
static int relay(int fd, const char *where, bool json)
{
	struct reader rd = { .fd = fd };
	struct progress pg = { .tty = isatty(STDOUT_FILENO) == 1 };
	char *line = NULL, *text, *end;
	long code;
	int rc;

	for (;;) {
		rc = read_line(&rd, &line);
		if (rc <= 0)
			break;
		if (!line[0])
			continue;
		text = line[1] == ' ' ? line + 2 : line + 1;
		switch (line[0]) {
		case 'o':
			progress_end(&pg);
			fputs(text, stdout);
			putchar('\n');
			break;
		case 'e':
			progress_end(&pg);
			fflush(stdout);
			fprintf(stderr, "%s: %s\n", prog, text);
			break;
		case 'p':
			if (!json)
				progress_record(&pg, text);
			break;
		case 'x':
			progress_end(&pg);
			errno = 0;
			code = strtol(text, &end, 10);
			if (errno || end == text || *end || code < 0 ||
			    code > 125) {
				fprintf(stderr,
					"%s: bad exit code from reftfsd: "
					"'%.40s'\n",
					prog, text);
				code = EXIT_FAIL;
			}
			free(rd.buf);
			return (int)code;
		default:
			break; /* a newer daemon's tag: skip it */
		}
	}
	progress_end(&pg);
	free(rd.buf);
	fflush(stdout);
	if (rc == -EINTR)
		fprintf(stderr, "%s: interrupted%s%s\n", prog,
			pg.have ? "; reftfsd goes on: " : "",
			pg.have ? pg.what : "");
	else if (rc == -ETIMEDOUT)
		fprintf(stderr, "%s: reftfsd at %s sent nothing for %d s\n",
			prog, where, ADM_IDLE_MS / 1000);
	else if (rc == 0)
		fprintf(stderr, "%s: reftfsd at %s closed the connection "
			"before the end of its answer\n", prog, where);
	else
		fprintf(stderr, "%s: reading from reftfsd at %s: %s\n", prog,
			where, strerror(-rc));
	return rc == -EINTR ? 130 : EXIT_FAIL;
}

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* --- main --------------------------------------------------------------- */

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "mount", required_argument, NULL, 'm' },
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa = { .sa_handler = on_sigint };
	const char *mopt = NULL, *sopt = NULL, *mnt = NULL;
	char req[ADM_MAX_LINE + 1], sock[PATH_MAX], mbuf[PATH_MAX];
	char rbuf[PATH_MAX];
	const struct mnt *me = NULL;
	struct mnts mounts = { 0 };
	bool json = false, dashdash = false;
	size_t len = 0;
	int c, i, fd, rc, code;

	while ((c = getopt_long(argc, argv, "+m:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			mopt = optarg;
			break;
		case 's':
			sopt = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			fputc('\n', stderr);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage_err("no command given");
		return EXIT_USAGE;
	}
	if (!strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[optind], "config"))
		return config_check(argc - optind - 1, argv + optind + 1);
	for (i = optind + 1; i < argc; i++)
		if (!strcmp(argv[i], "--json") && !dashdash)
			json = true;
		else if (!strcmp(argv[i], "--"))
			dashdash = true;

	/* The request: COMMAND [--json] ARGS, "--json" said once. */
	rc = add_word(req, sizeof(req) - 1, &len, argv[optind]);
	if (!rc && json)
		rc = add_word(req, sizeof(req) - 1, &len, "--json");
	dashdash = false;
	for (i = optind + 1; !rc && i < argc; i++) {
		if (!strcmp(argv[i], "--json") && !dashdash)
			continue;
		if (!strcmp(argv[i], "--"))
			dashdash = true;
		rc = add_word(req, sizeof(req) - 1, &len, argv[i]);
	}
	if (rc) {
		fprintf(stderr, "%s: request too long (at most %d bytes)\n",
			prog, ADM_MAX_LINE - 1);
		return EXIT_USAGE;
	}
	req[len++] = '\n';

	/* Where to send it. */
	rc = mnts_read(&mounts);
	if (rc < 0 && !sopt && !mopt) {
		fprintf(stderr, "%s: reading /proc/self/mounts: %s\n", prog,
			strerror(-rc));
		return EXIT_FAIL;
	}
	if (mopt) {
		rc = abs_path(mopt, mbuf, sizeof(mbuf));
		if (rc < 0) {
			fprintf(stderr, "%s: %s: %s\n", prog, mopt,
				strerror(-rc));
			mnts_release(&mounts);
			return EXIT_FAIL;
		}
		me = mnts_find(&mounts, mbuf);
		/* Not a mount point as named: resolve symlinks. */
		if (!me && realpath(mbuf, rbuf)) {
			snprintf(mbuf, sizeof(mbuf), "%s", rbuf);
			me = mnts_find(&mounts, mbuf);
		}
		mnt = mbuf;
	} else if (!sopt) {
		if (!mounts.n) {
			fprintf(stderr, "%s: no reftfs is mounted\n", prog);
			mnts_release(&mounts);
			return EXIT_FAIL;
		}
		if (mounts.n > 1) {
			fprintf(stderr, "%s: %zu reftfs are mounted; choose "
				"one with -m:\n", prog, mounts.n);
			for (i = 0; i < (int)mounts.n; i++)
				fprintf(stderr, "  %s\n", mounts.v[i].dir);
			mnts_release(&mounts);
			return EXIT_USAGE;
		}
		me = &mounts.v[0];
		mnt = me->dir;
	}
	if (sopt) {
		snprintf(sock, sizeof(sock), "%s", sopt);
		fd = connect_to(sock);
	} else {
		rc = rfs_ctl_default_path(mnt, sock, sizeof(sock));
		if (rc < 0) {
			fprintf(stderr, "%s: no socket path for %s: %s\n",
				prog, mnt, strerror(-rc));
			mnts_release(&mounts);
			return EXIT_FAIL;
		}
		fd = connect_default(sock, me);
	}
	if (fd < 0) {
		if (mnt)
			fprintf(stderr, "%s: cannot reach reftfsd for %s at "
				"%s: %s\n", prog, mnt, sock, strerror(-fd));
		else
			fprintf(stderr, "%s: cannot reach reftfsd at %s: %s\n",
				prog, sock, strerror(-fd));
		if (mnt && !me)
			fprintf(stderr, "%s: (no reftfs is mounted at %s)\n",
				prog, mnt);
		mnts_release(&mounts);
		return EXIT_FAIL;
	}
	mnts_release(&mounts);

	/* Ctrl-C during a --wait: end the bar's line, say what goes on. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);

	rc = send_all(fd, req, len);
	if (rc < 0) {
		fprintf(stderr, "%s: sending to reftfsd at %s: %s\n", prog,
			sock, strerror(-rc));
		close(fd);
		return EXIT_FAIL;
	}
	if (!strcmp(argv[optind], "version") && !json)
		printf("%s %s\n", prog, RFT_VERSION);
	code = relay(fd, sock, json);
	close(fd);
	if (fflush(stdout) == EOF || ferror(stdout)) {
		fprintf(stderr, "%s: writing output: %s\n", prog,
			strerror(errno));
		return EXIT_FAIL;
	}
	return code;
}
