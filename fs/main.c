/*
 * main.c - reftfsd: parse options, set up the engine, mount, serve.
 *
 *   reftfsd MOUNTPOINT [options]
 *   reftfs SOURCE MOUNTPOINT -o opts     (as mount.fuse3 runs it for
 *                                         "mount -t fuse.reftfs" and fstab)
 *
 * Exit status: 0 after a clean unmount, 1 when write-back at unmount
 * failed or (in a group) sealed files were left unprotected at the stop,
 * 2 for bad options or a setup error (one line says which).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <unistd.h>

#include "ctl.h"
#include "ctl_path.h"
#include "group.h"
#include "rfs.h"
#include "rft_notify.h"

#define EXIT_SETUP 2
#define READ_AHEAD_KB 16384
#define WORKERS 8 /* FUSE worker threads */
#define STOP_WAIT_MS 30000 /* --stop-wait's default */
/* What --mem leaves to the kernel, the daemon and the job (check_mem). */
#define MEM_RESERVE_MIN (1ULL << 30)
#define MEM_RESERVE_MAX (16ULL << 30)
/* A witness's engine holds the namespace only: no file data. */
#define WITNESS_MEM (64ULL << 20)

struct opts {
	struct eng_config cfg;
	struct grp_config grp;
	const char *source;
	char *mountpoint;
	char *persist_dir;
	char *spill_dir;	/* --spill DIR[:SIZE] */
	const char *ctl; /* control socket; NULL: rfs_ctl_default_path */
	bool foreground;
	bool debug;
	bool single_thread;
	bool direct_read;
	bool io_uring;	/* --io-uring */
	enum eng_sync sync;	/* --sync */
	bool sync_given;
	/* 1 asked for, 0 turned off (--no-...), -1 the default */
	int passthrough; /* on (-1) or --no-passthrough (0) */
	bool early_copy; /* --early-copy */
	int in_place; /* in place (-1) or --no-in-place (0) */
	bool mem_given;	/* --mem or -o mem= */
	unsigned stop_wait_ms; /* --stop-wait */
	unsigned join_timeout_ms; /* --join-timeout; 0: none */
	const char *config_mountpoint; /* --config's mountpoint key */
	bool check;	/* --check: the options checked, nothing mounted */
	char *owned[64]; /* copies of option values (-o strings and a config
			    file's lines are freed) */
	unsigned nowned;
	char fuse_opts[4096]; /* -o options for libfuse */
};

static const char *prog = "reftfsd";

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s MOUNTPOINT [options]\n"
		"       %s --witness --node ID --peers ... --witnesses ... [options]\n"
		"\n"
		"An in-memory checkpoint filesystem with write-back to shared storage.\n"
		"\n"
		"options:\n"
		"  --mem SIZE            memory budget for file data (default: half of RAM,\n"
		"                        or of a smaller cgroup limit); at most RAM less\n"
		"                        1/8 of it (1G to 16G)\n"
		"  --chunk-size SIZE     chunk size, a power of two from 1M to 4M (default 1M)\n"
		"  --keep K              newest checkpoints always kept in RAM (default 2)\n"
		"  --persist DIR         write checkpoints back to DIR (e.g. an NFS path)\n"
		"  --spill DIR[:SIZE]    a local disk below RAM: when memory runs short,\n"
		"                        sealed files of checkpoints outside --keep are\n"
		"                        written to DIR (at most SIZE; default 90%% of\n"
		"                        its free space) and read back from it, checked\n"
		"  --persist-every N     write back every Nth checkpoint; 0: only on flush\n"
		"                        and unmount (default 1)\n"
		"  --unmount-flush MODE  what unmount writes back: all, policy or none\n"
		"                        (default all)\n"
		"  --enospc-wait MS      how long a writer waits for memory before ENOSPC\n"
		"                        (default 2000)\n"
		"  --retry MS            write-back retry period after an error (default 5000)\n"
		"  --ctl PATH            control socket (default: derived from MOUNTPOINT)\n"
		"  --lock-memory         lock the memory budget in RAM as it is used\n"
		"                        (mlock): checkpoints never go to swap; needs\n"
		"                        RLIMIT_MEMLOCK (ulimit -l) of the whole budget\n"
		"                        or CAP_IPC_LOCK\n"
		"\n"
		"sharding group (several daemons protecting each other's checkpoints):\n"
		"  --node ID             this node's id in the group, from 0\n"
		"  --peers A0,A1,...     every node's HOST:PORT, in id order (static group)\n"
		"  --registry HOST:PORT  find the group through memcached instead\n"
		"  --group NAME          the group's name (default reftfs)\n"
		"  --group-size N        nodes in the group (with --registry)\n"
		"  --listen HOST:PORT    where to listen for peers (default: this node's\n"
		"                        --peers entry; needed with --registry)\n"
		"  --secret-file PATH    the group's shared secret (mode 0600 or 0400)\n"
		"  --dead-after SECONDS  a silent peer is declared dead after this (default 5)\n"
		"  --state-dir DIR       the namespace log's state (in a group; default\n"
		"                        /var/lib/reftfs/GROUP/nodeID as root, else\n"
		"                        $XDG_STATE_HOME/reftfs/GROUP/nodeID); its raft\n"
		"                        listens on the peer PORT + 1; one daemon per dir\n"
		"                        (locked: a second one exits 2)\n"
		"  --protect SCHEME      none (default); replicate:R: every sealed\n"
		"                        file is also held by R-1 peers; xor, xor:K or\n"
		"                        rs:K+M: parity on other nodes (K+M <= nodes)\n"
		"  --codec auto|isal|gpu the parity codec (default auto: the GPU when\n"
		"                        one is usable, else ISA-L; same bytes)\n"
		"  --protect-bw SIZE     bytes per second protection may send (default\n"
		"                        0: no limit)\n"
		"  --sync protect|persist|none\n"
		"                        what fsync of a written file waits for: its\n"
		"                        data protected as --protect says (default in a\n"
		"                        group with --protect; EIO after 30 s when it\n"
		"                        cannot be), written back to the persist dir\n"
		"                        (EIO when that fails), or nothing (default\n"
		"                        otherwise)\n"
		"  --stop-wait SECONDS   at a stop (unmount, SIGTERM, SIGINT), wait this\n"
		"                        long at most for this node's sealed files to be\n"
		"                        protected (default 30; 0: no wait); each one left\n"
		"                        unprotected is logged, the others show it lost,\n"
		"                        and reftfsd exits 1\n"
		"  --witnesses LIST      the group's witnesses: namespace log voters that\n"
		"                        hold no data, ids after the --peers ones; their\n"
		"                        HOST:PORTs (with --registry: their number); the\n"
		"                        same on every node\n"
		"  --witness             run as one of them (--node ID past the data\n"
		"                        nodes'): no mount point, no data\n"
		"  --join-timeout SECONDS  end with exit 1 when the group's namespace\n"
		"                        log has not taken this node by then (default:\n"
		"                        wait; meanwhile stat of the mount point answers\n"
		"                        at once, other calls EAGAIN after 10 s)\n"
		"\n"
		"tuning (the defaults measured best: docs/operations.md, \"Tuning\"):\n"
		"  --prefault            fault the whole memory budget in before mounting\n"
		"                        (default: in the background after mounting)\n"
		"  --no-prefault         fault memory in only as it is used\n"
		"  --io-uring            take FUSE requests over io_uring where the kernel\n"
		"                        offers it (libfuse 3.18+): small-file operations\n"
		"                        about twice as fast, large reads and writes slower\n"
		"  --no-passthrough      serve every read and mapping through the daemon\n"
		"                        (default, where it can: as root, alone, without\n"
		"                        --io-uring, kernel 6.9+ and libfuse 3.16+, large\n"
		"                        sealed files pass through to a copy in memory,\n"
		"                        written in place; the log says why where not)\n"
		"  --no-in-place         copy a large file for passthrough at seal\n"
		"  --early-copy          copy large files for passthrough while they are\n"
		"                        written (the writes slow down; not in place)\n"
		"  --direct-read         libfuse < 3.16: read-only opens bypass the page\n"
		"                        cache (faster reads; shared mmap of them fails)\n"
		"\n"
		"  --config FILE         options from FILE first, one per line: key =\n"
		"                        value, or key alone for a flag; keys as -o takes\n"
		"                        them, and mountpoint (e.g. /etc/reftfs/NAME.conf;\n"
		"                        the command line overrides it; -o config=FILE\n"
		"                        in fstab)\n"
		"  --check               check the options (and --config's file), mount\n"
		"                        nothing: exit 0, or 2 with the reason\n"
		"  -o OPT[,OPT...]       mount options: the above as mem=, chunk_size=,\n"
		"                        keep=, persist=, persist_every=, unmount_flush=,\n"
		"                        enospc_wait=, retry=, ctl=, state_dir=,\n"
		"                        stop_wait=, no_passthrough, io_uring, ...;\n"
		"                        others (allow_other, ...) go to FUSE\n"
		"  -f                    stay in the foreground\n"
		"  -s                    single-threaded\n"
		"  -d                    debug output (implies -f)\n"
		"  -h, --help            this text\n"
		"  -V, --version         version\n"
		"\n"
		"SIZE takes K, M, G or T (powers of 1024). Unmount with fusermount3 -u.\n",
		prog, prog);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The config file and line bad() speaks of; NULL: the command line. */
static const char *bad_file;
static unsigned bad_line;

/*
 * Say what is wrong with the command line, then how to use it; or with a
 * config file's line, and where.
 */
static int bad(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	if (bad_file)
		fprintf(stderr, "%s:%u: ", bad_file, bad_line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (!bad_file)
		usage(stderr);
	return -1;
}

static int parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && *end == 'i')
		end++;
	if (shift && (*end == 'B' || *end == 'b'))
		end++;
	if (*end || v == 0 || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, unsigned max, unsigned *out)
{
	unsigned long v;
	char *end;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* A copy of @val that lives as long as @o: -o values do not. */
static const char *keep_str(struct opts *o, const char *val)
{
	char *c;

	if (o->nowned == sizeof(o->owned) / sizeof(o->owned[0]))
		return NULL;
	c = strdup(val);
	if (c)
		o->owned[o->nowned++] = c;
	return c;
}

/* "5", "0.5", "2.25": seconds, into milliseconds (at most an hour). */
static int parse_seconds_ms(const char *s, unsigned *out)
{
	double v;
	char *end;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || end == s || !(v > 0) || v > 3600)
		return -1;
	*out = (unsigned)(v * 1000 + 0.5);
	return 0;
}

/* Long options with no letter of their own. */
enum {
	OPT_NO_PASSTHROUGH = 0x100,
	OPT_NO_IN_PLACE,
	OPT_STOP_WAIT,
	OPT_JOIN_TIMEOUT,
	OPT_WITNESSES,
	OPT_WITNESS,
	OPT_LOCK_MEMORY,
	OPT_SYNC,
	OPT_SPILL,
	OPT_CONFIG,
	OPT_CHECK,
};

/* The long options (getopt_long); those with no_argument are flags. */
static const struct option longopts[] = {
	{ "mem", required_argument, NULL, 'M' },
	{ "chunk-size", required_argument, NULL, 'C' },
	{ "keep", required_argument, NULL, 'K' },
	{ "persist", required_argument, NULL, 'P' },
	{ "persist-every", required_argument, NULL, 'E' },
	{ "unmount-flush", required_argument, NULL, 'U' },
	{ "enospc-wait", required_argument, NULL, 'W' },
	{ "retry", required_argument, NULL, 'R' },
	{ "ctl", required_argument, NULL, 'S' },
	{ "prefault", no_argument, NULL, 'F' },
	{ "no-prefault", no_argument, NULL, 'N' },
	{ "direct-read", no_argument, NULL, 'D' },
	{ "io-uring", no_argument, NULL, 'I' },
	{ "early-copy", no_argument, NULL, 'A' },
	{ "no-passthrough", no_argument, NULL, OPT_NO_PASSTHROUGH },
	{ "no-in-place", no_argument, NULL, OPT_NO_IN_PLACE },
	{ "node", required_argument, NULL, 'n' },
	{ "peers", required_argument, NULL, 'p' },
	{ "registry", required_argument, NULL, 'r' },
	{ "group", required_argument, NULL, 'g' },
	{ "group-size", required_argument, NULL, 'z' },
	{ "listen", required_argument, NULL, 'l' },
	{ "secret-file", required_argument, NULL, 'k' },
	{ "dead-after", required_argument, NULL, 't' },
	{ "state-dir", required_argument, NULL, 'Y' },
	{ "protect", required_argument, NULL, 'T' },
	{ "protect-bw", required_argument, NULL, 'B' },
	{ "stop-wait", required_argument, NULL, OPT_STOP_WAIT },
	{ "join-timeout", required_argument, NULL, OPT_JOIN_TIMEOUT },
	{ "witnesses", required_argument, NULL, OPT_WITNESSES },
	{ "witness", no_argument, NULL, OPT_WITNESS },
	{ "lock-memory", no_argument, NULL, OPT_LOCK_MEMORY },
	{ "sync", required_argument, NULL, OPT_SYNC },
	{ "spill", required_argument, NULL, OPT_SPILL },
	{ "codec", required_argument, NULL, 'G' },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* @key takes no value (-o prefault=1 is refused): getopt's no_argument. */
static bool is_flag(const char *key)
{
	for (const struct option *l = longopts; l->name; l++)
		if (!strcmp(key, l->name))
			return l->has_arg == no_argument;
	return false;
}

/*
 * Apply one of our options, named as on the command line without "--".
 * 0, -1 when refused (bad() said why), 1 when it is not ours.
 */
static int set_opt(struct opts *o, const char *key, const char *val)
{
	uint64_t size;

	if (val && is_flag(key))
		return bad("--%s takes no value", key);
	if (!strcmp(key, "mem")) {
		if (parse_size(val, &size) < 0)
			return bad("bad --mem '%s': want a size like 512M or 8G",
				   val ? val : "");
		if (size < RFT_CHUNK_MAX)
			return bad("--mem %s is less than one 4M chunk", val);
		o->cfg.mem_bytes = size;
		o->mem_given = true;
	} else if (!strcmp(key, "chunk-size")) {
		if (parse_size(val, &size) < 0 || size < RFT_CHUNK_MIN ||
		    size > RFT_CHUNK_MAX || (size & (size - 1)))
			return bad("bad --chunk-size '%s': want 1M, 2M or 4M",
				   val ? val : "");
		o->cfg.chunk_size = (uint32_t)size;
	} else if (!strcmp(key, "keep")) {
		if (parse_uint(val, 1000000, &o->cfg.keep) < 0)
			return bad("bad --keep '%s': want a count >= 0",
				   val ? val : "");
	} else if (!strcmp(key, "persist")) {
		if (!val || !*val)
			return bad("--persist needs a directory");
		free(o->persist_dir);
		o->persist_dir = strdup(val);
	} else if (!strcmp(key, "spill")) {
		char *colon;

		if (!val || !*val)
			return bad("--spill needs a directory (DIR or DIR:SIZE)");
		free(o->spill_dir);
		o->spill_dir = strdup(val);
		if (!o->spill_dir)
			return bad("out of memory");
		o->cfg.spill_bytes = 0;
		colon = strrchr(o->spill_dir, ':');
		if (colon && !strchr(colon, '/')) {
			if (parse_size(colon + 1, &o->cfg.spill_bytes) < 0 ||
			    !o->cfg.spill_bytes)
				return bad("bad --spill '%s': want DIR or "
					   "DIR:SIZE, SIZE like 100G", val);
			*colon = '\0';
		}
	} else if (!strcmp(key, "persist-every")) {
		if (parse_uint(val, 1000000, &o->cfg.persist_every) < 0)
			return bad("bad --persist-every '%s': want a count >= 0",
				   val ? val : "");
	} else if (!strcmp(key, "unmount-flush")) {
		if (val && !strcmp(val, "all"))
			o->cfg.unmount_flush = ENG_UNMOUNT_FLUSH_ALL;
		else if (val && !strcmp(val, "policy"))
			o->cfg.unmount_flush = ENG_UNMOUNT_FLUSH_POLICY;
		else if (val && !strcmp(val, "none"))
			o->cfg.unmount_flush = ENG_UNMOUNT_FLUSH_NONE;
		else
			return bad("bad --unmount-flush '%s': want all, policy "
				   "or none", val ? val : "");
	} else if (!strcmp(key, "enospc-wait")) {
		if (parse_uint(val, 3600000, &o->cfg.enospc_wait_ms) < 0)
			return bad("bad --enospc-wait '%s': want milliseconds",
				   val ? val : "");
	} else if (!strcmp(key, "retry")) {
		if (parse_uint(val, 3600000, &o->cfg.retry_ms) < 0 ||
		    o->cfg.retry_ms == 0)
			return bad("bad --retry '%s': want milliseconds > 0",
				   val ? val : "");
	} else if (!strcmp(key, "ctl")) {
		if (!val || !*val)
			return bad("--ctl needs a path");
		if (!(o->ctl = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "prefault")) {
		o->cfg.prefault = ENG_PREFAULT_START;
	} else if (!strcmp(key, "no-prefault")) {
		o->cfg.prefault = ENG_PREFAULT_NONE;
	} else if (!strcmp(key, "lock-memory")) {
		o->cfg.lock_memory = true;
	} else if (!strcmp(key, "direct-read")) {
		o->direct_read = true;
	} else if (!strcmp(key, "io-uring")) {
		o->io_uring = true;
	} else if (!strcmp(key, "no-passthrough")) {
		o->passthrough = 0;
	} else if (!strcmp(key, "early-copy")) {
		o->early_copy = true;
	} else if (!strcmp(key, "no-in-place")) {
		o->in_place = 0;
	} else if (!strcmp(key, "node")) {
		unsigned n;

		if (parse_uint(val, GRP_MAX_MEMBERS - 1, &n) < 0)
			return bad("bad --node '%s': want an id from 0 to %d",
				   val ? val : "", GRP_MAX_MEMBERS - 1);
		o->grp.node = (int)n;
	} else if (!strcmp(key, "peers")) {
		if (!val || !*val)
			return bad("--peers needs HOST:PORT,HOST:PORT,...");
		if (!(o->grp.peers = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "registry")) {
		if (!val || !*val)
			return bad("--registry needs HOST:PORT");
		if (!(o->grp.registry = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "group")) {
		if (!val || !*val)
			return bad("--group needs a name");
		if (!(o->grp.name = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "group-size")) {
		if (parse_uint(val, GRP_MAX_MEMBERS, &o->grp.size) < 0 ||
		    o->grp.size == 0)
			return bad("bad --group-size '%s': want 1 to %d",
				   val ? val : "", GRP_MAX_MEMBERS);
	} else if (!strcmp(key, "listen")) {
		if (!val || !*val)
			return bad("--listen needs HOST:PORT");
		if (!(o->grp.listen = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "secret-file")) {
		if (!val || !*val)
			return bad("--secret-file needs a path");
		if (!(o->grp.secret_file = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "state-dir")) {
		if (!val || !*val)
			return bad("--state-dir needs a directory");
		if (!(o->grp.state_dir = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "protect")) {
		if (!val || !*val)
			return bad("--protect needs none, replicate:R, xor or "
				   "rs:K+M");
		if (!(o->grp.protect = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "sync")) {
		if (val && !strcmp(val, "protect"))
			o->sync = ENG_SYNC_PROTECT;
		else if (val && !strcmp(val, "persist"))
			o->sync = ENG_SYNC_PERSIST;
		else if (val && !strcmp(val, "none"))
			o->sync = ENG_SYNC_NONE;
		else
			return bad("bad --sync '%s': want protect, persist or "
				   "none", val ? val : "");
		o->sync_given = true;
	} else if (!strcmp(key, "codec")) {
		if (!val || (strcmp(val, "auto") && strcmp(val, "isal") &&
			     strcmp(val, "gpu")))
			return bad("bad --codec '%s': want auto, isal or gpu",
				   val ? val : "");
		if (!(o->grp.codec = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "protect-bw")) {
		if (val && !strcmp(val, "0"))
			o->grp.protect_bw = 0;
		else if (parse_size(val, &o->grp.protect_bw) < 0)
			return bad("bad --protect-bw '%s': want bytes per "
				   "second (K, M, G), 0 for no limit",
				   val ? val : "");
	} else if (!strcmp(key, "stop-wait")) {
		if (val && !strcmp(val, "0"))
			o->stop_wait_ms = 0;
		else if (parse_seconds_ms(val, &o->stop_wait_ms) < 0)
			return bad("bad --stop-wait '%s': want seconds, e.g. "
				   "30 (0: no wait)", val ? val : "");
	} else if (!strcmp(key, "join-timeout")) {
		if (parse_seconds_ms(val, &o->join_timeout_ms) < 0)
			return bad("bad --join-timeout '%s': want seconds, e.g. "
				   "60", val ? val : "");
	} else if (!strcmp(key, "witnesses")) {
		if (!val || !*val)
			return bad("--witnesses needs HOST:PORT,... (or, with "
				   "--registry, a number)");
		if (!(o->grp.witnesses = keep_str(o, val)))
			return bad("out of memory");
	} else if (!strcmp(key, "witness")) {
		o->grp.witness = true;
	} else if (!strcmp(key, "dead-after")) {
		if (parse_seconds_ms(val, &o->grp.dead_after_ms) < 0)
			return bad("bad --dead-after '%s': want seconds, e.g. 5 "
				   "or 0.5", val ? val : "");
	} else {
		return 1; /* not ours */
	}
	return 0;
}

static int add_fuse_opt(struct opts *o, const char *opt)
{
	size_t n = strlen(o->fuse_opts);

	if (n + strlen(opt) + 2 > sizeof(o->fuse_opts))
		return bad("too many -o options");
	if (n)
		o->fuse_opts[n++] = ',';
	strcpy(o->fuse_opts + n, opt);
	return 0;
}

/* Split "-o a=1,b,c=2"; ours are applied, the rest kept for libfuse. */
static int parse_o(struct opts *o, const char *arg)
{
	char *copy = strdup(arg), *save = NULL;
	int rc = 0;

	if (!copy)
		return -1;
	for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), key[64];
		size_t klen = eq ? (size_t)(eq - tok) : strlen(tok);

		/* Options for mount(8) and systemd that mean nothing here. */
		if (!strcmp(tok, "_netdev") || !strcmp(tok, "nofail") ||
		    !strncmp(tok, "x-", 2) || !strncmp(tok, "comment=", 8))
			continue;
		if (klen >= sizeof(key)) {
			rc = add_fuse_opt(o, tok);
			continue;
		}
		memcpy(key, tok, klen);
		key[klen] = '\0';
		for (char *k = key; *k; k++)
			if (*k == '_')
				*k = '-';
		/* Options mount(8) and mount.fuse3 add that mean nothing here. */
		if (!strcmp(key, "rw") || !strcmp(key, "dev") ||
		    !strcmp(key, "suid") || !strcmp(key, "exec") ||
		    !strcmp(key, "auto") || !strcmp(key, "noauto") ||
		    !strcmp(key, "user") || !strcmp(key, "nouser") ||
		    !strcmp(key, "defaults"))
			continue;
		if (!strcmp(key, "config"))
			continue; /* read first (find_config) */
		rc = set_opt(o, key, eq ? eq + 1 : NULL);
		if (rc == 1)
			rc = add_fuse_opt(o, tok);
	}
	free(copy);
	return rc;
}

/* @s without the blanks at either end (in place). */
static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' ||
			   end[-1] == '\n' || end[-1] == '\r'))
		*--end = '\0';
	return s;
}

/* FUSE's own mount options a config file may give (-o takes any). */
static const char *const fuse_keys[] = { "allow_other", "allow_root",
					 "default_permissions" };

/* @key (dashes for underscores) is FUSE's fuse_keys[i]: i, else -1. */
static int fuse_key(const char *key)
{
	for (size_t i = 0; i < sizeof(fuse_keys) / sizeof(fuse_keys[0]); i++) {
		const char *a = key, *b = fuse_keys[i];

		while (*a && (*a == *b || (*a == '-' && *b == '_')))
			a++, b++;
		if (!*a && !*b)
			return (int)i;
	}
	return -1;
}

/*
 * One line of a config file, blank or a comment already skipped: "key =
 * value", or "key" alone for a flag.
 */
static int config_line(struct opts *o, char *line)
{
	char *eq = strchr(line, '='), *key = line, *val = NULL;
	int rc, fk;

	if (eq) {
		*eq = '\0';
		key = trim(line);
		val = trim(eq + 1);
		if (!*val)
			return bad("'%s =' has no value", key);
	}
	if (!*key)
		return bad("a value with no key");
	for (char *k = key; *k; k++)
		if (*k == '_')
			*k = '-';
	fk = fuse_key(key);
	if (fk >= 0)
		return val ? bad("%s takes no value", fuse_keys[fk])
			   : add_fuse_opt(o, fuse_keys[fk]);
	if (!strcmp(key, "mountpoint")) {
		if (!val || *val != '/')
			return bad("mountpoint needs an absolute path");
		return (o->config_mountpoint = keep_str(o, val))
			       ? 0
			       : bad("out of memory");
	}
	if (!strcmp(key, "config"))
		return bad("a config file cannot name another");
	rc = set_opt(o, key, val);
	if (rc == 1)
		return bad("unknown key '%s'", key);
	return rc;
}

/*
 * --config FILE: one option per line, "key = value" or "key" alone for a
 * flag, keys as -o takes them (dashes or underscores), "mountpoint", and
 * FUSE's allow_other, allow_root, default_permissions; a line whose first
 * character past blanks is '#' is a comment.  Read before the command
 * line, which overrides it.  A bad line stops it, named FILE:LINE.
 */
static int load_config(struct opts *o, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int rc = 0;

	if (!f) {
		fprintf(stderr, "%s: --config %s: %s\n", prog, path,
			strerror(errno));
		return -1;
	}
	bad_file = path;
	bad_line = 0;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		char *l;

		bad_line++;
		if (!strchr(line, '\n') && !feof(f)) {
			rc = bad("line longer than %zu bytes",
				 sizeof(line) - 2);
			break;
		}
		l = trim(line);
		if (*l && *l != '#')
			rc = config_line(o, l);
	}
	if (rc == 0 && ferror(f))
		rc = bad("cannot read it: %s", strerror(errno));
	fclose(f);
	bad_file = NULL;
	return rc < 0 ? -1 : 0;
}

/* The file of a "config=FILE" among -o's comma-separated @opts, or NULL. */
static const char *o_config(struct opts *o, const char *opts)
{
	const char *p = opts;

	while (p) {
		const char *end = strchr(p, ',');

		if (!strncmp(p, "config=", 7)) {
			size_t n = end ? (size_t)(end - p) - 7 : strlen(p + 7);
			char *f = strndup(p + 7, n);
			const char *kept = f ? keep_str(o, f) : NULL;

			free(f);
			return kept;
		}
		p = end ? end + 1 : NULL;
	}
	return NULL;
}

/*
 * The config file of the command line (--config FILE, --config=FILE, or
 * -o config=FILE as fstab gives it), read first.  NULL and 0 for none;
 * -1 when given twice or without a file.
 */
static int find_config(struct opts *o, int argc, char **argv,
		       const char **file)
{
	*file = NULL;
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		const char *f = NULL;

		if (!strcmp(argv[i], "--config")) {
			if (i + 1 == argc)
				return bad("--config needs a file");
			f = argv[++i];
		} else if (!strncmp(argv[i], "--config=", 9)) {
			f = argv[i] + 9;
		} else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
			f = o_config(o, argv[++i]);
		} else if (!strncmp(argv[i], "-o", 2)) {
			f = o_config(o, argv[i] + 2);
		}
		if (!f)
			continue;
		if (!*f)
			return bad("--config needs a file");
		if (*file)
			return bad("--config given twice");
		*file = f;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	const char *pos[3], *config;
	int npos = 0, c;

	if (find_config(o, argc, argv, &config) < 0 ||
	    (config && load_config(o, config) < 0))
		return -1;
	opterr = 0;
	/* "+": stop at nothing; "-": keep positionals in order. */
	while ((c = getopt_long(argc, argv, "-o:fsdhV", longopts, NULL)) !=
	       -1) {
		const char *name = NULL;

		switch (c) {
		case 1:
			if (npos == 3)
				return bad("unexpected argument '%s'", optarg);
			pos[npos++] = optarg;
			continue;
		case 'o':
			if (parse_o(o, optarg) < 0)
				return -1;
			continue;
		case 'f':
			o->foreground = true;
			continue;
		case 's':
			o->single_thread = true;
			continue;
		case 'd':
			o->debug = o->foreground = true;
			continue;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("reftfsd %s (libfuse %s)\n", RFT_VERSION,
			       fuse_pkgversion());
			exit(0);
		case OPT_CONFIG:
			continue; /* read first (find_config) */
		case OPT_CHECK:
			o->check = true;
			continue;
		case '?':
			/* Long options report their internal letter: name them. */
			if (optopt && strchr("o", optopt))
				return bad("option '-%c' needs a value",
					   optopt);
			if (optopt && optopt < 'A')
				return bad("option '-%c' is not known",
					   optopt);
			return bad("option '%s' is not known or lacks its value",
				   argv[optind - 1]);
		case 'M': name = "mem"; break;
		case 'C': name = "chunk-size"; break;
		case 'K': name = "keep"; break;
		case 'P': name = "persist"; break;
		case 'E': name = "persist-every"; break;
		case 'U': name = "unmount-flush"; break;
		case 'W': name = "enospc-wait"; break;
		case 'R': name = "retry"; break;
		case 'S': name = "ctl"; break;
		case 'F': name = "prefault"; break;
		case 'N': name = "no-prefault"; break;
		case 'D': name = "direct-read"; break;
		case 'I': name = "io-uring"; break;
		case 'A': name = "early-copy"; break;
		case OPT_NO_PASSTHROUGH: name = "no-passthrough"; break;
		case OPT_NO_IN_PLACE: name = "no-in-place"; break;
		case 'n': name = "node"; break;
		case 'p': name = "peers"; break;
		case 'r': name = "registry"; break;
		case 'g': name = "group"; break;
		case 'z': name = "group-size"; break;
		case 'l': name = "listen"; break;
		case 'k': name = "secret-file"; break;
		case 't': name = "dead-after"; break;
		case 'Y': name = "state-dir"; break;
		case 'T': name = "protect"; break;
		case 'B': name = "protect-bw"; break;
		case OPT_STOP_WAIT: name = "stop-wait"; break;
		case OPT_JOIN_TIMEOUT: name = "join-timeout"; break;
		case OPT_WITNESSES: name = "witnesses"; break;
		case OPT_WITNESS: name = "witness"; break;
		case OPT_LOCK_MEMORY: name = "lock-memory"; break;
		case OPT_SYNC: name = "sync"; break;
		case OPT_SPILL: name = "spill"; break;
		case 'G': name = "codec"; break;
		default:
			return bad("cannot parse the options");
		}
		if (set_opt(o, name, optarg) != 0)
			return -1;
	}
	if (o->early_copy && o->passthrough == 0)
		return bad("--early-copy and --no-passthrough do not go together "
			   "(it copies files for passthrough reads)");
	/* On unless turned off; in place unless copied early or turned off. */
	if (o->passthrough < 0)
		o->passthrough = 1;
	if (o->in_place < 0)
		o->in_place = o->passthrough && !o->early_copy;
	if (o->grp.witness) {
		if (npos || o->config_mountpoint)
			return bad("--witness: a witness mounts nothing (no "
				   "MOUNTPOINT)");
		if (o->mem_given || o->persist_dir || o->spill_dir ||
		    o->cfg.lock_memory)
			return bad("--witness: a witness holds no data (no "
				   "--mem, --persist, --spill or "
				   "--lock-memory)");
		return 0;
	}
	if (npos == 0 && o->config_mountpoint)
		pos[npos++] = o->config_mountpoint;
	if (npos == 0)
		return bad("no mount point given");
	if (npos == 3)
		return bad("too many arguments");
	/* mount.fuse3 passes "SOURCE MOUNTPOINT". */
	if (npos == 2)
		o->source = pos[0];
	o->mountpoint = strdup(pos[npos - 1]);
	return o->mountpoint ? 0 : -1;
}

/* The fuse module's switch for FUSE over io_uring (kernel 6.14 and later). */
#define URING_PARAM "/sys/module/fuse/parameters/enable_uring"

/*
 * --io-uring: whether to ask for it.  libfuse 3.18 or later can; the
 * kernel offers it only while its fuse module's enable_uring is on (off by
 * default).  When it is off the mount goes on over /dev/fuse, and says so:
 * the files are the same either way.
 */
static int check_io_uring(const struct opts *o, bool *use)
{
	*use = false;
	if (!o->io_uring)
		return 0;
#ifdef FUSE_CAP_OVER_IO_URING
	FILE *f = fopen(URING_PARAM, "r");
	int c = f ? fgetc(f) : EOF;

	if (f)
		fclose(f);
	if (c == 'Y' || c == '1') {
		*use = true;
		return 0;
	}
	if (f)
		fprintf(stderr, "%s: warning: --io-uring: the kernel's fuse module "
			"has io_uring off (as root: echo Y > %s); requests go "
			"over /dev/fuse\n", prog, URING_PARAM);
	else
		fprintf(stderr, "%s: warning: --io-uring: this kernel has no "
			"FUSE over io_uring (6.14 and later do); requests go "
			"over /dev/fuse\n", prog);
	return 0;
#else
	return bad("--io-uring needs libfuse 3.18 or later; this reftfsd is "
		   "built with libfuse %s", fuse_pkgversion());
#endif
}

#ifdef FUSE_CAP_OVER_IO_URING
/*
 * With io_uring, libfuse's own loop: it stops the ring threads when the
 * session ends, and nothing else in its API does.  Its workers only see
 * what still comes over /dev/fuse (INIT); the rings bring the rest, each
 * answered from its ring's buffer, so WRITEs are copied into the arena
 * before they are answered either way (fs/loop.c says why ours does not).
 */
static int loop_uring(struct fuse_session *se)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	int rc;

	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_max_threads(cfg, WORKERS);
	rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}
#endif

/* What the machine offers the daemon (check_mem). */
struct mem_facts {
	uint64_t total;		/* MemTotal */
	uint64_t avail;		/* MemAvailable */
	uint64_t cgroup;	/* smallest cgroup memory limit over us, or 0 */
	char cgroup_file[PATH_MAX]; /* the file that limit came from */
};

static int read_meminfo(struct mem_facts *m)
{
	unsigned long long kb;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			m->total = (uint64_t)kb << 10;
		else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			m->avail = (uint64_t)kb << 10;
	}
	fclose(f);
	return m->total ? 0 : -ENODATA;
}

/*
 * Lower m->cgroup to the limit in @file of cgroup @path and of each of its
 * ancestors under @base: any of them can OOM-kill us.  "max" (v2) and
 * missing files (a path outside our mount namespace) set nothing; v1's
 * "unlimited" is a huge number that MemTotal then undercuts.
 */
static void cgroup_walk(struct mem_facts *m, const char *base,
			const char *path, const char *file)
{
	char dir[PATH_MAX], fn[PATH_MAX], val[64];
	size_t blen = strlen(base);

	if ((size_t)snprintf(dir, sizeof(dir), "%s%s", base, path) >=
	    sizeof(dir))
		return;
	while (strlen(dir) > blen && dir[strlen(dir) - 1] == '/')
		dir[strlen(dir) - 1] = '\0';
	for (;;) {
		unsigned long long v;
		char *end, *slash;
		FILE *f;

		if ((size_t)snprintf(fn, sizeof(fn), "%s/%s", dir, file) <
		    sizeof(fn) && (f = fopen(fn, "re"))) {
			if (fgets(val, sizeof(val), f)) {
				errno = 0;
				v = strtoull(val, &end, 10);
				if (!errno && end != val &&
				    (*end == '\n' || !*end) && v &&
				    (!m->cgroup || v < m->cgroup)) {
					m->cgroup = v;
					strcpy(m->cgroup_file, fn);
				}
			}
			fclose(f);
		}
		slash = strrchr(dir, '/');
		if (strlen(dir) <= blen || !slash || slash < dir + blen)
			break;
		*slash = '\0';
	}
}

/* The memory limits of our cgroups, v2 ("0::/path") and v1 ("memory"). */
static void read_cgroup_limits(struct mem_facts *m)
{
	char line[PATH_MAX + 64];
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2, *nl;

		if (!c1 || !(c2 = strchr(c1 + 1, ':')))
			continue;
		*c2 = '\0';
		if ((nl = strchr(c2 + 1, '\n')))
			*nl = '\0';
		if (!strncmp(line, "0:", 2) && c2 == c1 + 1) {
			cgroup_walk(m, "/sys/fs/cgroup", c2 + 1, "memory.max");
			continue;
		}
		for (char *save = NULL, *tok = strtok_r(c1 + 1, ",", &save);
		     tok; tok = strtok_r(NULL, ",", &save))
			if (!strcmp(tok, "memory"))
				cgroup_walk(m, "/sys/fs/cgroup/memory", c2 + 1,
					    "memory.limit_in_bytes");
	}
	fclose(f);
}

static const char *fmt_size(char *buf, size_t len, uint64_t n)
{
	if (n >= (1ULL << 30))
		snprintf(buf, len, "%.1f GiB", (double)n / (1ULL << 30));
	else
		snprintf(buf, len, "%llu MiB", (unsigned long long)(n >> 20));
	return buf;
}

/*
 * Refuse a memory budget the machine cannot hold: the arena is faulted in
 * as it is used and ahead of use, so a budget past RAM ends with the OOM
 * killer (or the cgroup's) and the checkpoints in RAM with it.  What this
 * process may use is MemTotal, or a smaller cgroup limit; 1/8 of that,
 * from 1 GiB to 16 GiB but at most half, stays with the kernel, this
 * daemon's own tables and the training job.  Without --mem the budget is
 * half of it, which always passes.  MemAvailable is not the rule (it
 * moves as the job runs) but is said, and --prefault, which takes the
 * whole budget at mount, is warned when it exceeds it.
 */
static int check_mem(struct opts *o)
{
	char b[5][32];
	struct mem_facts m;
	uint64_t limit, reserve;

	memset(&m, 0, sizeof(m));
	if (read_meminfo(&m) < 0) {
		fprintf(stderr, "%s: cannot read /proc/meminfo: the memory "
			"budget is not checked\n", prog);
		return 0;
	}
	read_cgroup_limits(&m);
	limit = m.cgroup && m.cgroup < m.total ? m.cgroup : m.total;
	reserve = limit / 8;
	if (reserve < MEM_RESERVE_MIN)
		reserve = MEM_RESERVE_MIN;
	if (reserve > MEM_RESERVE_MAX)
		reserve = MEM_RESERVE_MAX;
	if (reserve > limit / 2)
		reserve = limit / 2;
	if (!o->mem_given) {
		o->cfg.mem_bytes = limit / 2;
		return 0;
	}
	if (o->cfg.mem_bytes > limit - reserve) {
		fprintf(stderr,
			"%s: --mem %s is more than this machine can hold: at "
			"most %s (%s %s less %s kept for the system; "
			"MemAvailable %s)\n",
			prog, fmt_size(b[0], sizeof(b[0]), o->cfg.mem_bytes),
			fmt_size(b[1], sizeof(b[1]), limit - reserve),
			limit == m.total ? "MemTotal" : m.cgroup_file,
			fmt_size(b[2], sizeof(b[2]), limit),
			fmt_size(b[3], sizeof(b[3]), reserve),
			fmt_size(b[4], sizeof(b[4]), m.avail));
		return -1;
	}
	if (o->cfg.prefault == ENG_PREFAULT_START &&
	    o->cfg.mem_bytes > m.avail)
		fprintf(stderr, "%s: warning: --prefault takes %s at once, "
			"more than MemAvailable %s: other memory will be "
			"reclaimed or swapped\n", prog,
			fmt_size(b[0], sizeof(b[0]), o->cfg.mem_bytes),
			fmt_size(b[1], sizeof(b[1]), m.avail));
	return 0;
}

/*
 * --sync: what fsync waits for.  By default a writer's fsync waits for
 * its data to be protected where something protects it (a group with a
 * --protect scheme), and for nothing alone.
 */
static int check_sync(struct opts *o)
{
	bool protects = grp_wanted(&o->grp) && o->grp.protect &&
			strcmp(o->grp.protect, "none");

	if (!o->sync_given) {
		o->cfg.sync = protects ? ENG_SYNC_PROTECT : ENG_SYNC_NONE;
		return 0;
	}
	if (o->sync == ENG_SYNC_PROTECT && !protects)
		return bad("--sync protect: nothing protects this node's files "
			   "(it needs a group with --protect other than "
			   "none)");
	if (o->sync == ENG_SYNC_PERSIST && !o->persist_dir)
		return bad("--sync persist: there is no persist dir to write "
			   "back to (it needs --persist DIR)");
	o->cfg.sync = o->sync;
	return 0;
}

/* Has this process capability @cap in its effective set? */
static bool has_cap(unsigned cap)
{
	char line[256];
	unsigned long long eff = 0;
	bool found = false;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "CapEff: %llx", &eff) == 1;
	fclose(f);
	return found && cap < 64 && (eff >> cap & 1);
}

/*
 * --lock-memory: the kernel counts the whole budget against
 * RLIMIT_MEMLOCK when the arena is locked, though pages are locked only as
 * they are used.  Refuse now, with the numbers, when the limit is lower
 * and CAP_IPC_LOCK (which lifts it) is missing.  A cgroup's memory limit
 * is check_mem's: locked pages count in it as any other.
 */
static int check_lock(const struct opts *o)
{
	struct rlimit rl;
	char b[2][32];

	if (!o->cfg.lock_memory || has_cap(CAP_IPC_LOCK) ||
	    getrlimit(RLIMIT_MEMLOCK, &rl) < 0 ||
	    rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= o->cfg.mem_bytes)
		return 0;
	fprintf(stderr,
		"%s: --lock-memory: the memory budget %s is more than "
		"RLIMIT_MEMLOCK allows (%s; raise it with ulimit -l, "
		"LimitMEMLOCK= in a systemd unit or memlock in "
		"limits.conf), and this process lacks CAP_IPC_LOCK\n",
		prog, fmt_size(b[0], sizeof(b[0]), o->cfg.mem_bytes),
		fmt_size(b[1], sizeof(b[1]), (uint64_t)rl.rlim_cur));
	return -1;
}

/*
 * Is @path a mount point already?  (FUSE would happily stack on it.)  Its
 * filesystem type into @type, when it is.
 */
static bool is_mounted(const char *path, char *type, size_t tlen)
{
	char line[8192], mnt[PATH_MAX], fstype[64];
	const char *sep;
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		/* id parent major:minor root mountpoint ... - type source ... */
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 &&
		    !strcmp(mnt, path)) {
			found = true;
			sep = strstr(line, " - ");
			if (!sep || sscanf(sep, " - %63s", fstype) != 1)
				fstype[0] = '\0';
			snprintf(type, tlen, "%s", fstype);
		}
	}
	fclose(f);
	return found;
}

/*
 * A reftfs mount whose daemon ended without unmounting (a crash, a
 * SIGKILL) answers ENOTCONN to everything; a new daemon cannot mount over
 * it.  Being that, and only that, it is cleared, so that a restart (the
 * service manager's, or an operator's) needs no hand.  Needs root; 0 when
 * cleared.
 */
static int clear_dead_mount(const char *path)
{
	char type[64];

	if (path[0] != '/' || !is_mounted(path, type, sizeof(type)) ||
	    strcmp(type, "fuse.reftfs") != 0)
		return -1;
	if (umount2(path, MNT_DETACH) < 0)
		return -1;
	rft_warn("mount point %s was a dead reftfs mount (its daemon ended "
		 "without unmounting): cleared", path);
	return 0;
}

static int check_mountpoint(struct opts *o)
{
	char real[PATH_MAX], type[64];
	struct stat st;
	int rc = stat(o->mountpoint, &st);

	if (rc < 0 && errno == ENOTCONN && clear_dead_mount(o->mountpoint) == 0)
		rc = stat(o->mountpoint, &st);
	if (rc < 0) {
		if (errno == ENOTCONN)
			fprintf(stderr,
				"%s: mount point %s is a dead FUSE mount; "
				"clear it with: fusermount3 -uz %s\n",
				prog, o->mountpoint, o->mountpoint);
		else
			fprintf(stderr, "%s: mount point %s: %s\n", prog,
				o->mountpoint, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "%s: mount point %s is not a directory\n",
			prog, o->mountpoint);
		return -1;
	}
	if (!realpath(o->mountpoint, real)) {
		fprintf(stderr, "%s: mount point %s: %s\n", prog,
			o->mountpoint, strerror(errno));
		return -1;
	}
	if (is_mounted(real, type, sizeof(type))) {
		fprintf(stderr, "%s: mount point %s is busy: something is "
			"mounted there already (%s)\n", prog, real, type);
		return -1;
	}
	free(o->mountpoint);
	o->mountpoint = strdup(real);
	return o->mountpoint ? 0 : -1;
}

/*
 * *@dir (@what: "persist dir", "spill dir"), if given: a writable
 * directory outside the mount point, made absolute.
 */
static int check_dir(struct opts *o, const char *what, char **dir)
{
	char real[PATH_MAX];
	struct stat st;

	if (!*dir)
		return 0;
	if (stat(*dir, &st) < 0) {
		fprintf(stderr, "%s: %s %s: %s\n", prog, what, *dir,
			strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "%s: %s %s is not a directory\n", prog, what,
			*dir);
		return -1;
	}
	if (access(*dir, W_OK | X_OK) < 0) {
		fprintf(stderr, "%s: %s %s is not writable: %s\n", prog, what,
			*dir, strerror(errno));
		return -1;
	}
	if (!realpath(*dir, real))
		return -1;
	if (o->mountpoint && !strncmp(real, o->mountpoint,
				      strlen(o->mountpoint)) &&
	    (real[strlen(o->mountpoint)] == '/' ||
	     real[strlen(o->mountpoint)] == '\0')) {
		fprintf(stderr, "%s: %s %s is inside the mount point\n", prog,
			what, real);
		return -1;
	}
	free(*dir);
	*dir = strdup(real);
	return *dir ? 0 : -1;
}

/*
 * --spill: the directory as check_dir wants it, not the persist dir nor
 * inside it (write-back would see its files), and its budget: SIZE, or
 * 90% of the free space of its filesystem now.
 */
static int check_spill(struct opts *o)
{
	size_t n = o->persist_dir ? strlen(o->persist_dir) : 0;
	struct statvfs vfs;

	if (!o->spill_dir)
		return 0;
	if (check_dir(o, "spill dir", &o->spill_dir) < 0)
		return -1;
	if (n && !strncmp(o->spill_dir, o->persist_dir, n) &&
	    (o->spill_dir[n] == '/' || o->spill_dir[n] == '\0')) {
		fprintf(stderr, "%s: spill dir %s is inside the persist dir\n",
			prog, o->spill_dir);
		return -1;
	}
	if (!o->cfg.spill_bytes) {
		if (statvfs(o->spill_dir, &vfs) < 0) {
			fprintf(stderr, "%s: spill dir %s: %s\n", prog,
				o->spill_dir, strerror(errno));
			return -1;
		}
		o->cfg.spill_bytes =
			(uint64_t)vfs.f_bavail * vfs.f_frsize / 10 * 9;
	}
	return 0;
}

/* Raise the readahead of our mount's bdi: buffered READs are 128K else. */
static void raise_readahead(const char *mountpoint)
{
	char line[8192], mnt[PATH_MAX], dev[32], path[128], val[16];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int fd, len;

	if (!f)
		return;
	dev[0] = '\0';
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %31s %*s %4095s", dev, mnt) == 2 &&
		    !strcmp(mnt, mountpoint))
			break;
		else
			dev[0] = '\0';
	fclose(f);
	if (!dev[0])
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return; /* not root: the default stays */
	/*
	 * One write(2), not dprintf(): glibc 2.36's dprintf leaks its 4 KiB
	 * buffer when the lseek it starts with fails, and that lseek fails
	 * (ENODEV) when the mount has already ended and taken the bdi's
	 * sysfs files with it (seen under LeakSanitizer).
	 */
	len = snprintf(val, sizeof(val), "%d\n", READ_AHEAD_KB);
	if (write(fd, val, (size_t)len) != len)
		rft_dbg("cannot raise readahead: %s", strerror(errno));
	close(fd);
}

static void fuse_log_to_rft(enum fuse_log_level level, const char *fmt,
			    va_list ap) __attribute__((format(printf, 2, 0)));

/*
 * libfuse's own messages go through our log, on its levels.  It prints
 * some lines in pieces, so pieces are gathered up to the newline.
 */
static void fuse_log_to_rft(enum fuse_log_level level, const char *fmt,
			    va_list ap)
{
	static __thread char line[1024];
	static __thread size_t len;
	int n;

	n = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
	if (n < 0)
		return;
	len = len + (size_t)n < sizeof(line) - 1 ? len + (size_t)n
						 : sizeof(line) - 1;
	if (len == 0 || (line[len - 1] != '\n' && len < sizeof(line) - 1))
		return;
	if (line[len - 1] == '\n')
		line[len - 1] = '\0';
	rft_log(level < FUSE_LOG_ERR ? RFT_LOG_ERR : (int)level, "fuse", 0,
		"%s", line);
	len = 0;
}

/*
 * A node of a group joins the group's namespace (eng_group_ready: caught
 * up with the log, its LOST told, its rebuild started) on a thread of its
 * own while the mount answers: stat of the root at once, every other call
 * after the join, or EAGAIN when it has not come within 10 s (eng_fresh).
 * So nothing that looks at a mount point (mountpoint(1), df, monitoring)
 * hangs on a group that has not formed, as it did when the loop started
 * only after the join.  --join-timeout ends the daemon, exit 1, when the
 * join has not come by then: a SIGTERM to the process, which the FUSE
 * loop's signal handler turns into a stop.
 */
struct joiner {
	struct eng *e;
	unsigned timeout_ms;	/* 0: none */
	bool witness;		/* no mount */
	char ready[PATH_MAX + 64]; /* the service manager's STATUS once in */
	pthread_t thread;
	bool started;
	atomic_bool stop;	/* the loop ended: give up */
	atomic_bool failed;	/* --join-timeout passed */
};

static void *join_main(void *arg)
{
	struct joiner *j = arg;
	uint64_t t0 = rft_now_ms();
	int rc, tries = 0;

	while ((rc = eng_group_ready(j->e, 2000)) < 0) {
		if (atomic_load(&j->stop) || rc == -ESHUTDOWN)
			return NULL;
		if (j->timeout_ms && rft_now_ms() - t0 >= j->timeout_ms) {
			rft_err("the group's namespace log did not take this "
				"node in %u s (--join-timeout): %s; stopping",
				j->timeout_ms / 1000, strerror(-rc));
			atomic_store(&j->failed, true);
			rft_notify("STATUS=the group's namespace log did not "
				   "take this node in %u s (--join-timeout)",
				   j->timeout_ms / 1000);
			kill(getpid(), SIGTERM);
			return NULL;
		}
		if (tries++ % 15 == 0)
			rft_info("waiting for the group's namespace log (%s)%s",
				 strerror(-rc),
				 j->witness ? "" :
				 "; meanwhile stat of the mount point "
				 "answers, other calls EAGAIN after 10 s");
	}
	rft_info("namespace caught up with the group's log");
	rft_notify("READY=1\nSTATUS=%s", j->ready);
	return NULL;
}

/* Its thread, with every signal blocked: they are the FUSE loop's. */
static int join_start(struct joiner *j)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&j->thread, NULL, join_main, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	j->started = rc == 0;
	return rc;
}

static void join_stop(struct joiner *j)
{
	if (!j->started)
		return;
	atomic_store(&j->stop, true);
	pthread_join(j->thread, NULL);
	j->started = false;
}

/*
 * --witness: a voter of the group's namespace log that holds no data and
 * mounts nothing.  Its engine applies the log as any node's does (so its
 * snapshots, and a replacement's catch-up from it, are the same), with an
 * arena no file ever fills: a witness never creates one, protects nothing
 * (grp_protect) and is no data node's holder.  The control socket answers
 * as a mount's does.  It runs until SIGTERM, SIGINT or SIGHUP, or until
 * --join-timeout passes, taken with sigwait: every thread starts with
 * them blocked.
 */
static int run_witness(struct opts *o)
{
	struct eng *e = NULL;
	struct rfs_ctl *ctl = NULL;
	struct grp *grp = NULL;
	struct joiner join = { 0 };
	char name[128], sock[PATH_MAX];
	sigset_t stop;
	int sig = 0, rc, status = EXIT_SETUP;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	o->cfg.mem_bytes = WITNESS_MEM;
	o->cfg.prefault = ENG_PREFAULT_NONE;
	o->cfg.node = o->grp.node;
	if (eng_new(&o->cfg, &e) < 0)
		goto out; /* eng_new said why */
	snprintf(name, sizeof(name), "witness:%s:%d", o->grp.name,
		 o->grp.node);
	if (!o->ctl && rfs_ctl_default_path(name, sock, sizeof(sock))) {
		fprintf(stderr, "%s: control socket path too long\n", prog);
		goto out;
	}
	if (rfs_ctl_new(e, o->ctl ? o->ctl : sock, &ctl) < 0 ||
	    grp_new(&o->grp, &grp) < 0)
		goto out; /* they said why */
	rfs_ctl_set_group(ctl, grp);
	if (eng_join_group(e, grp) < 0)
		goto out;
	if (!o->foreground)
		rft_log_syslog("reftfsd");
	if (fuse_daemonize(o->foreground) != 0)
		goto out;
	rc = eng_start(e);
	if (rc < 0) {
		rft_err("cannot start the engine: %s", strerror(-rc));
		goto out_stop; /* as a mount's daemon does */
	}
	if (grp_start(grp) < 0 || rfs_ctl_start(ctl) < 0)
		goto out_stop; /* they said why */
	rft_info("witness %d of group %s: control socket %s", o->grp.node,
		 o->grp.name, o->ctl ? o->ctl : sock);
	join.e = e;
	join.timeout_ms = o->join_timeout_ms;
	join.witness = true;
	snprintf(join.ready, sizeof(join.ready), "witness %d of group %s",
		 o->grp.node, o->grp.name);
	rft_notify("STATUS=joining the group's namespace log");
	if ((rc = join_start(&join)) < 0) {
		rft_err("cannot start the group's join: %s", strerror(-rc));
		goto out_stop;
	}
	sigwait(&stop, &sig);
	rft_info("witness %d: stopping (%s)", o->grp.node, strsignal(sig));
	rft_notify("STOPPING=1\nSTATUS=stopping (%s)", strsignal(sig));
	status = atomic_load(&join.failed) ? 1 : 0;
out_stop:
	join_stop(&join);
	rfs_ctl_free(ctl);
	ctl = NULL;
	grp_stop(grp);
	if (eng_stop(e) < 0)
		status = 1;
out:
	rfs_ctl_free(ctl);
	grp_free(grp);
	eng_free(e);
	return status;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct rfs rfs;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	struct eng *e = NULL;
	struct rfs_ctl *ctl = NULL;
	struct grp *grp = NULL;
	struct rfs_inval *inval = NULL;
	struct joiner join = { 0 };
	char fsopts[PATH_MAX + 64], sock[PATH_MAX], err[256];
	int rc, status = EXIT_SETUP;

	prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	memset(&o, 0, sizeof(o));
	o.passthrough = o.in_place = -1;
	o.stop_wait_ms = STOP_WAIT_MS;
	memset(&rfs, 0, sizeof(rfs));
	eng_config_defaults(&o.cfg);
	grp_config_defaults(&o.grp);
	if (parse_args(argc, argv, &o) < 0)
		goto out;
	if (grp_config_check(&o.grp, err, sizeof(err)) < 0) {
		bad("%s", err);
		goto out;
	}
	if (check_sync(&o) < 0)
		goto out;
	if (o.join_timeout_ms && !grp_wanted(&o.grp)) {
		bad("--join-timeout: a single node has no group to join (give "
		    "--node and --peers or --registry)");
		goto out;
	}
	if (o.check) {
		/*
		 * The options alone: nothing on this host is looked at (its
		 * memory, its mlock limit), so that a node's config checks on
		 * any machine.
		 */
		printf("%s: the options are valid\n", prog);
		status = 0;
		goto out;
	}
	if (!o.grp.witness && (check_mem(&o) < 0 || check_lock(&o) < 0))
		goto out;
	if (o.debug)
		rft_log_max = RFT_LOG_DBG;
	if (o.grp.witness) {
		status = run_witness(&o);
		goto out;
	}
	if (check_mountpoint(&o) < 0 ||
	    check_dir(&o, "persist dir", &o.persist_dir) < 0 ||
	    check_spill(&o) < 0 || check_io_uring(&o, &rfs.io_uring) < 0)
		goto out;
	o.cfg.mountpoint = o.mountpoint;
	o.cfg.persist_dir = o.persist_dir;
	o.cfg.spill_dir = o.spill_dir;
	o.cfg.node = grp_wanted(&o.grp) ? o.grp.node : -1;
	fuse_set_log_func(fuse_log_to_rft);

	rc = eng_new(&o.cfg, &e);
	if (rc < 0)
		goto out; /* eng_new said why */
	/* Bound now, so that a socket in use stops us before mounting. */
	if (!o.ctl && rfs_ctl_default_path(o.mountpoint, sock, sizeof(sock))) {
		fprintf(stderr, "%s: control socket path too long\n", prog);
		goto out;
	}
	if (rfs_ctl_new(e, o.ctl ? o.ctl : sock, &ctl) < 0)
		goto out; /* rfs_ctl_new said why */
	/*
	 * The secret, the peer port and the namespace log's state dir:
	 * refused before mounting.
	 */
	if (grp_wanted(&o.grp)) {
		if (grp_new(&o.grp, &grp) < 0)
			goto out; /* grp_new said why */
		rfs_ctl_set_group(ctl, grp);
		if (eng_join_group(e, grp) < 0)
			goto out; /* eng_join_group said why */
	}

	rfs.eng = e;
	rfs.direct_read = o.direct_read;
	/* Alone only, and not from ring threads (a take may wait). */
	rfs.passthrough = o.passthrough && !grp && !o.io_uring;
	rfs.early_copy = o.early_copy;
	rfs.in_place = o.in_place;
	if (!o.passthrough)
		rft_info("passthrough: off (--no-passthrough)");
	else if (!rfs.passthrough)
		rft_info("passthrough: off (%s)",
			 grp ? "in a group: another node's write changes a "
			       "file without this kernel seeing it" :
			       "with --io-uring: a take may wait, and ring "
			       "threads must not");
	/*
	 * In a group, other nodes change names and sizes: the kernel must
	 * ask each time, not answer from what it cached.  Alone, every change
	 * of a name, a size or a mode comes through this kernel, which keeps
	 * its cache right itself: a stat or a re-open of a file then costs no
	 * round trip (only st_blocks, which eviction lowers, can lag).
	 */
	rfs.attr_timeout = grp ? 0.0 : RFS_ATTR_TIMEOUT;
	/*
	 * Page-cache reads of small sealed files are open-to-close coherent
	 * (a changed file's cache is dropped at the next open); in a group
	 * the change can come from another node: every open stays direct.
	 */
	rfs.cache_small = grp ? 0 : RFS_CACHE_SMALL;
	rfs.max_write = 1u << 20;
	pthread_mutex_init(&rfs.stale_lock, NULL);
	rfs.info.libfuse = fuse_pkgversion();
	rfs_ctl_set_fuse(ctl, &rfs.info);

	snprintf(fsopts, sizeof(fsopts),
		 "subtype=reftfs,fsname=%s,default_permissions%s",
		 o.source ? o.source : "reftfs",
		 rfs.io_uring ? ",io_uring" : "");
	if (fuse_opt_add_arg(&args, prog) || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, fsopts) ||
	    (o.fuse_opts[0] && (fuse_opt_add_arg(&args, "-o") ||
				fuse_opt_add_arg(&args, o.fuse_opts))) ||
	    (o.debug && fuse_opt_add_arg(&args, "-d"))) {
		fprintf(stderr, "%s: out of memory\n", prog);
		goto out;
	}
	se = fuse_session_new(&args, &rfs_oper, sizeof(rfs_oper), &rfs);
	rfs.se = se;
	if (!se) {
		fprintf(stderr, "%s: bad FUSE options: %s\n", prog,
			o.fuse_opts[0] ? o.fuse_opts : "(none)");
		goto out;
	}
	if (fuse_set_signal_handlers(se) != 0)
		goto out;
	if (fuse_session_mount(se, o.mountpoint) != 0) {
		fprintf(stderr, "%s: cannot mount on %s (see the line above)\n",
			prog, o.mountpoint);
		goto out_signals;
	}
	raise_readahead(o.mountpoint);
	if (!o.foreground)
		rft_log_syslog("reftfsd");
	if (fuse_daemonize(o.foreground) != 0)
		goto out_unmount;
	/* Another node's renames and removals, out of this kernel's cache. */
	if (grp && ((rc = rfs_inval_new(e, se, &inval)) < 0 ||
		    (rc = rfs_inval_start(inval)) < 0)) {
		rft_err("cannot start the name invalidation: %s",
			strerror(-rc));
		goto out_unmount;
	}
	rc = eng_start(e);
	if (rc < 0) {
		rft_err("cannot start the engine: %s", strerror(-rc));
		goto out_unmount;
	}
	if (grp && grp_start(grp) < 0)
		goto out_unmount; /* grp_start said why */
	rc = rfs_ctl_start(ctl);
	if (rc < 0)
		goto out_unmount; /* rfs_ctl_start said why */
	rft_info("control socket %s", o.ctl ? o.ctl : sock);
	rft_info("mounted %s (memory %llu MiB, chunk %u KiB%s%s)",
		 o.mountpoint,
		 (unsigned long long)(o.cfg.mem_bytes >> 20),
		 o.cfg.chunk_size >> 10, o.persist_dir ? ", persist " : "",
		 o.persist_dir ? o.persist_dir : "");

	/*
	 * Ready for the service manager when the mount serves: alone now, in
	 * a group once the join has come (until then only stat answers).
	 */
	join.e = e;
	join.timeout_ms = o.join_timeout_ms;
	if (grp) {
		snprintf(join.ready, sizeof(join.ready),
			 "mounted %s, node %d of group %s", o.mountpoint,
			 o.grp.node, o.grp.name);
		rft_notify("STATUS=mounted %s; joining the group's namespace "
			   "log", o.mountpoint);
	} else {
		rft_notify("READY=1\nSTATUS=mounted %s", o.mountpoint);
	}
	if (grp && (rc = join_start(&join)) < 0) {
		rft_err("cannot start the group's join: %s", strerror(-rc));
		goto out_unmount;
	}
	/* The rings are threads of their own: -s does not apply to them. */
#ifdef FUSE_CAP_OVER_IO_URING
	if (rfs.io_uring) {
		rc = rfs_lane_start(&rfs);
		if (rc == 0)
			rc = loop_uring(se);
		rfs_lane_stop(&rfs);
	} else
#endif
	if (o.single_thread)
		rc = fuse_session_loop(se);
	else
		rc = rfs_loop_run(se, WORKERS, rfs.max_write);
	/* A positive value is the signal that ended the loop: a clean stop. */
	status = rc < 0 || atomic_load(&join.failed) ? 1 : 0;
	rft_notify("STOPPING=1\nSTATUS=unmounting %s", o.mountpoint);

out_unmount:
	join_stop(&join);
	fuse_session_unmount(se);
	rft_info("unmounted %s", o.mountpoint);
	/*
	 * A node of a group protects its sealed files before it goes (as
	 * eng_stop writes back to the persist dir), while its peers and the
	 * log still run, and names what it cannot: its memory goes with it.
	 * The control socket still answers meanwhile (protect --wait).
	 */
	if (grp && eng_group_caught_up(e)) {
		rft_notify("STATUS=protecting this node's sealed files before "
			   "it leaves the group");
		if (eng_group_leave(e, o.stop_wait_ms) > 0)
			status = 1;
	}
	rfs_ctl_free(ctl); /* it reports on the engine: gone before it stops */
	ctl = NULL;
	grp_stop(grp);
	if (o.persist_dir && o.cfg.unmount_flush != ENG_UNMOUNT_FLUSH_NONE)
		rft_notify("STATUS=writing back to %s", o.persist_dir);
	if (eng_stop(e) < 0)
		status = 1;
	rfs_inval_free(inval); /* the engine hands it nothing more */
	inval = NULL;
out_signals:
	fuse_remove_signal_handlers(se);
out:
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	rfs_ctl_free(ctl);
	rfs_inval_free(inval);
	grp_free(grp);
	eng_free(e);
	free(o.mountpoint);
	free(o.persist_dir);
	free(o.spill_dir);
	while (o.nowned > 0)
		free(o.owned[--o.nowned]);
	return status;
}
