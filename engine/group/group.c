/*
 * group.c - the group as one object for the daemon: options, the secret,
 * the TCP transport, membership and the namespace log, put together and
 * reported.
 *
 * The namespace log (nslog.c) runs in every group.  Its raft links
 * listen one port above the peer transport's (HOST:PORT in --peers or
 * --listen: raft on HOST:PORT+1), so one address names both.  A --peers
 * group knows every address up front; a --registry group starts the log
 * knowing only its own, and membership hands it each address the
 * registry gives (on_addr), first ones and changed ones alike: the log
 * founds the group's log once it has them all, and a node that already
 * has a log links to each peer as its address arrives.  Losing memcached
 * keeps the addresses known and raft's links with them.  Its state
 * machine is the engine's namespace: engine/gns.c sets it (grp_set_fsm)
 * and proposes every namespace change, seal, protect and persist record.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "erasure.h"
#include "group.h"
#include "group_i.h"

_Static_assert(GRP_MAX_MEMBERS == GRP_MAX_NODES, "one limit on group size");

#define GRP_ADDR_MAX sizeof(((struct memb_node *)0)->addr)

struct grp {
	struct grp_config cfg;
	struct grp_secret secret;
	int self;
	int nodes;		/* data nodes */
	int members;		/* data nodes and witnesses */
	uint64_t incarnation;
	char *addr_buf;		/* the --peers string, split in place */
	char *wit_buf;		/* the --witnesses string, the same */
	const char *addrs[GRP_MAX_NODES];
	const char *listen;
	struct peer_xport *x;
	struct memb *memb;
	struct nslog *log;
	char state_dir[PATH_MAX];
	char raft_listen[GRP_ADDR_MAX];
	char raft_addr[GRP_MAX_NODES][GRP_ADDR_MAX];
	bool started;

	struct nslog_fsm fsm;	/* the engine's; set before grp_start */

	pthread_mutex_t lock;
	bool declared_dead;	/* protected by lock */
};

void grp_config_defaults(struct grp_config *c)
{
	memset(c, 0, sizeof(*c));
	c->node = -1;
	c->name = GRP_NAME_DEFAULT;
	c->dead_after_ms = GRP_DEAD_AFTER_DEFAULT_MS;
}

bool grp_wanted(const struct grp_config *c)
{
	return c->node >= 0 || c->peers || c->registry;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/*
 * "host:port" or "[v6]:port", with a port from 1 to 65535 (in *@portp
 * when not NULL).
 */
static bool addr_port(const char *a, size_t len, unsigned long *portp)
{
	const char *colon = NULL;
	unsigned long port = 0;
	size_t i;

	if (len == 0 || len >= sizeof(((struct memb_node *)0)->addr))
		return false;
	for (i = 0; i < len; i++)
		if (a[i] == ':')
			colon = a + i;
	if (!colon || colon == a || colon == a + len - 1)
		return false;
	if (a[0] == '[' && colon[-1] != ']')
		return false;
	for (const char *p = colon + 1; p < a + len; p++) {
		if (*p < '0' || *p > '9')
			return false;
		port = port * 10 + (unsigned long)(*p - '0');
		if (port > 65535)
			return false;
	}
	if (portp)
		*portp = port;
	return port > 0;
}

static bool addr_ok(const char *a, size_t len)
{
	return addr_port(a, len, NULL);
}

/*
 * The namespace log's address for peer address @a (@len bytes): the same
 * host, the port above.  -EINVAL when there is none (port 65535).
 */
static int raft_addr_of(const char *a, size_t len, char *out, size_t outlen)
{
	const char *colon = NULL;
	unsigned long port;
	int n;

	if (!addr_port(a, len, &port) || port >= 65535)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (a[i] == ':')
			colon = a + i;
	n = snprintf(out, outlen, "%.*s:%lu", (int)(colon - a), a, port + 1);
	return n < 0 || (size_t)n >= outlen ? -EINVAL : 0;
}

/*
 * Count the entries of a list separated by ',' (or ';', which -o options
 * need, as they split on commas), checking each.
 */
static int count_addrs(const char *list, const char *opt, bool raft, char *err,
		       size_t errlen)
{
	const char *p = list;
	unsigned long port;
	int n = 0;

	for (;;) {
		const char *comma = strpbrk(p, ",;");
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		if (!addr_port(p, len, &port))
			return fail(err, errlen,
				    "%s: '%.*s' is not HOST:PORT (entry %d)",
				    opt, (int)len, p, n);
		if (raft && port == 65535)
			return fail(err, errlen,
				    "%s: '%.*s': the namespace log listens on "
				    "PORT+1, so PORT must be below 65535",
				    opt, (int)len, p);
		if (++n > GRP_MAX_NODES)
			return fail(err, errlen,
				    "%s: more than %d nodes", opt,
				    GRP_MAX_NODES);
		if (!comma)
			return n;
		p = comma + 1;
	}
}

/*
 * --protect for a group of @nodes: "none", or "replicate:R" with R from 1
 * to the group's size, "xor" or "xor:K", "rs:K+M" with k + m nodes at most.
 */
static int check_protect(const struct grp_config *c, int nodes, char *err,
			 size_t errlen)
{
	struct ers_scheme s;

	if (!c->protect || !strcmp(c->protect, "none"))
		return 0;
	if (ers_scheme_parse(c->protect, &s) < 0)
		return fail(err, errlen, "--protect '%s': %s", c->protect,
			    ers_last_error());
	if (c->codec && strcmp(c->codec, "auto") && strcmp(c->codec, "isal") &&
	    strcmp(c->codec, "gpu"))
		return fail(err, errlen, "--codec '%s': want auto, isal or gpu",
			    c->codec);
	if (c->codec && !strcmp(c->codec, "gpu") &&
	    ers_backend_probe(ERS_BACKEND_GPU) < 0)
		return fail(err, errlen, "--codec gpu: %s", ers_last_error());
	if (s.kind != ERS_REPLICATE) {
		int k = s.k;

		if (ers_scheme_fit(&s, nodes) < 0)
			return fail(err, errlen,
				    "--protect %s needs %d nodes (k + m), the "
				    "group has %d",
				    c->protect, k ? k + s.m : s.m + 1, nodes);
		return 0;
	}
	if (s.m + 1 > nodes)
		return fail(err, errlen,
			    "--protect %s needs %d nodes, the group has %d",
			    c->protect, s.m + 1, nodes);
	return 0;
}

/* A count of 0 to GRP_MAX_NODES, digits only. */
static int parse_count(const char *s, unsigned *out)
{
	unsigned long v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > GRP_MAX_NODES)
			return -EINVAL;
	}
	*out = (unsigned)v;
	return 0;
}

/*
 * --witnesses for a group of @nodes data nodes: with --peers a list of
 * addresses, with --registry a number.  The number of witnesses, or
 * -EINVAL.
 */
static int count_witnesses(const struct grp_config *c, int nodes, char *err,
			   size_t errlen)
{
	unsigned w = 0;
	int n;

	if (!c->witnesses) {
		n = 0;
	} else if (c->peers) {
		n = count_addrs(c->witnesses, "--witnesses", true, err, errlen);
		if (n < 0)
			return n;
	} else {
		if (parse_count(c->witnesses, &w) < 0)
			return fail(err, errlen,
				    "--witnesses '%s': with --registry, the "
				    "number of witnesses",
				    c->witnesses);
		n = (int)w;
	}
	if (nodes + n > GRP_MAX_NODES)
		return fail(err, errlen,
			    "%d nodes and %d witnesses: more than %d members",
			    nodes, n, GRP_MAX_NODES);
	if (c->witness && (c->node < nodes || c->node >= nodes + n))
		return fail(err, errlen,
			    "--witness: --node %d is not a witness's id%s",
			    c->node, n ? "" : " (no --witnesses)");
	if (!c->witness && c->node >= nodes && c->node < nodes + n)
		return fail(err, errlen,
			    "--node %d is a witness in --witnesses: start it "
			    "with --witness",
			    c->node);
	return n;
}

int grp_config_check(const struct grp_config *c, char *err, size_t errlen)
{
	unsigned long lport = 0;
	int n, w;

	if (!grp_wanted(c)) {
		if (c->protect && strcmp(c->protect, "none"))
			return fail(err, errlen,
				    "--protect %s: a single node has no "
				    "peers to protect its data on (give "
				    "--node and --peers)",
				    c->protect);
		if (c->witnesses || c->witness)
			return fail(err, errlen,
				    "--witness%s: only for a group (give "
				    "--node and --peers or --registry)",
				    c->witness ? "" : "es");
		return 0;
	}
	if (c->node < 0)
		return fail(err, errlen,
			    "--peers and --registry need --node ID");
	if (!c->peers && !c->registry)
		return fail(err, errlen,
			    "--node needs --peers LIST or --registry HOST:PORT");
	if (c->peers && c->registry)
		return fail(err, errlen,
			    "--peers and --registry are two ways to find the "
			    "group: give one");
	if (!c->secret_file)
		return fail(err, errlen,
			    "a group needs --secret-file (the shared secret "
			    "its members authenticate with)");
	if (!c->name || !*c->name || strlen(c->name) >= 64 ||
	    strpbrk(c->name, " /\t\n"))
		return fail(err, errlen,
			    "--group: a name of 1 to 63 characters, no "
			    "spaces or slashes");
	if (c->dead_after_ms < 100 || c->dead_after_ms > 3600 * 1000)
		return fail(err, errlen,
			    "--dead-after: from 0.1 to 3600 seconds");
	if (c->listen && !addr_ok(c->listen, strlen(c->listen)))
		return fail(err, errlen, "--listen: '%s' is not HOST:PORT",
			    c->listen);
	if (c->listen && addr_port(c->listen, strlen(c->listen), &lport) &&
	    lport == 65535)
		return fail(err, errlen,
			    "--listen: the namespace log listens on PORT+1, "
			    "so PORT must be below 65535");
	if (c->state_dir &&
	    (!*c->state_dir || strlen(c->state_dir) >= PATH_MAX - 64))
		return fail(err, errlen,
			    "--state-dir: a path of 1 to %d characters",
			    PATH_MAX - 65);
	if (c->peers) {
		n = count_addrs(c->peers, "--peers", true, err, errlen);
		if (n < 0)
			return n;
		w = count_witnesses(c, n, err, errlen);
		if (w < 0)
			return w;
		if (c->node >= n + w)
			return fail(err, errlen,
				    "--node %d is not in --peers%s (%d "
				    "entries: ids 0 to %d)",
				    c->node, w ? " or --witnesses" : "",
				    n + w, n + w - 1);
		if (c->size && (int)c->size != n)
			return fail(err, errlen,
				    "--group-size %u but --peers lists %d",
				    c->size, n);
		return check_protect(c, n, err, errlen);
	}
	n = count_addrs(c->registry, "--registry", false, err, errlen);
	if (n < 0)
		return n;
	if (c->size < 1 || c->size > GRP_MAX_NODES)
		return fail(err, errlen,
			    "--registry needs --group-size N (1 to %d)",
			    GRP_MAX_NODES);
	w = count_witnesses(c, (int)c->size, err, errlen);
	if (w < 0)
		return w;
	if ((unsigned)c->node >= c->size + (unsigned)w)
		return fail(err, errlen,
			    "--node %d is not below --group-size %u%s",
			    c->node, c->size, w ? " plus --witnesses" : "");
	if (!c->listen)
		return fail(err, errlen,
			    "--registry needs --listen HOST:PORT (the "
			    "address this node publishes)");
	return check_protect(c, (int)c->size, err, errlen);
}

/* The group's --protect scheme: 1, 0 for none, -EINVAL. */
static int group_scheme(const struct grp *g, struct ers_scheme *s)
{
	memset(s, 0, sizeof(*s));
	if (!g->cfg.protect || !strcmp(g->cfg.protect, "none"))
		return 0;
	return ers_scheme_parse(g->cfg.protect, s) < 0 ? -EINVAL : 1;
}

int grp_protect(const struct grp *g, struct ers_scheme *s)
{
	/* A witness holds no data: it protects nothing. */
	if (g->cfg.witness) {
		memset(s, 0, sizeof(*s));
		return 0;
	}
	return group_scheme(g, s);
}

uint64_t grp_protect_bw(const struct grp *g)
{
	return g->cfg.protect_bw;
}

int grp_codec(const struct grp *g)
{
	const char *c = g->cfg.codec;

	return !c || !strcmp(c, "auto") ? ERS_BACKEND_AUTO
	       : !strcmp(c, "gpu")	? ERS_BACKEND_GPU
					: ERS_BACKEND_ISAL;
}

int grp_state_dir_default(const char *name, int node, char *buf, size_t len)
{
	const char *base = NULL, *sub = "";
	struct passwd *pw;
	int n;

	if (geteuid() == 0) {
		base = "/var/lib";
	} else {
		base = getenv("XDG_STATE_HOME");
		/* The XDG spec: a relative path is invalid, ignore it. */
		if (!base || base[0] != '/') {
			base = getenv("HOME");
			if ((!base || base[0] != '/') &&
			    (pw = getpwuid(geteuid())) && pw->pw_dir)
				base = pw->pw_dir;
			if (!base || base[0] != '/')
				return -ENOENT;
			sub = "/.local/state";
		}
	}
	n = snprintf(buf, len, "%s%s/reftfs/%s/node%d", base, sub, name, node);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/*
 * The namespace log's state machine is the engine's (engine/gns.c, set by
 * grp_set_fsm before the group starts).  Without one (a daemon that never
 * joined its engine, or a unit test) no entry is known and a snapshot is
 * nothing.
 */
static int fsm_apply(void *ctx, uint64_t index, const void *buf, size_t len)
{
	struct grp *g = ctx;

	if (g->fsm.apply)
		return g->fsm.apply(g->fsm.ctx, index, buf, len);
	rft_warn("namespace log: entry %llu of %zu bytes is of no kind this "
		 "daemon knows",
		 (unsigned long long)index, len);
	return -EINVAL;
}

static int fsm_snapshot(void *ctx, void **buf, size_t *len)
{
	struct grp *g = ctx;

	if (g->fsm.snapshot)
		return g->fsm.snapshot(g->fsm.ctx, buf, len);
	*buf = NULL;
	*len = 0;
	return 0;
}

static int fsm_restore(void *ctx, uint64_t index, const void *buf,
		       size_t len)
{
	struct grp *g = ctx;

	if (g->fsm.restore)
		return g->fsm.restore(g->fsm.ctx, index, buf, len);
	return len == 0 ? 0 : -EINVAL;
}

int grp_set_fsm(struct grp *g, const struct nslog_fsm *fsm)
{
	if (g->started)
		return -EBUSY;
	g->fsm = *fsm;
	return 0;
}

struct peer_xport *grp_xport(struct grp *g)
{
	return g->x;
}

struct memb *grp_memb(struct grp *g)
{
	return g->memb;
}

struct nslog *grp_log(struct grp *g)
{
	return g->log;
}

int grp_self(const struct grp *g)
{
	return g->self;
}

int grp_nodes(const struct grp *g)
{
	return g->nodes;
}

int grp_members(const struct grp *g)
{
	return g->members;
}

uint64_t grp_incarnation(const struct grp *g)
{
	return g->incarnation;
}

unsigned grp_dead_after_ms(const struct grp *g)
{
	return g->cfg.dead_after_ms;
}

/*
 * Set up the namespace log (grp_new).  A --registry group gives it no
 * address but this node's: on_addr() gives the others as they come.
 */
static int log_new(struct grp *g)
{
	const struct nslog_fsm fsm = {
		.ctx = g,
		.apply = fsm_apply,
		.snapshot = fsm_snapshot,
		.restore = fsm_restore,
	};
	const char *addrs[GRP_MAX_NODES];
	struct nslog_opts lo = { 0 };
	int i, rc;

	if (g->cfg.state_dir && g->cfg.state_dir[0] != '/') {
		char cwd[PATH_MAX];

		/* Absolute: a daemon in the background runs in "/". */
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(g->state_dir, sizeof(g->state_dir), "%s/%s", cwd,
			     g->cfg.state_dir) >= (int)sizeof(g->state_dir)) {
			rft_err("--state-dir %s: cannot make it absolute",
				g->cfg.state_dir);
			return -ENAMETOOLONG;
		}
	} else if (g->cfg.state_dir) {
		snprintf(g->state_dir, sizeof(g->state_dir), "%s",
			 g->cfg.state_dir);
	} else {
		rc = grp_state_dir_default(g->cfg.name, g->self, g->state_dir,
					   sizeof(g->state_dir));
		if (rc < 0) {
			rft_err("no --state-dir and no default for it (%s): "
				"give --state-dir DIR",
				rc == -ENOENT ? "no home directory" :
						strerror(-rc));
			return rc;
		}
	}
	if (raft_addr_of(g->listen, strlen(g->listen), g->raft_listen,
			 sizeof(g->raft_listen)) < 0) {
		rft_err("--listen: no namespace log port above %s", g->listen);
		return -EINVAL;
	}
	for (i = 0; i < g->members; i++) {
		addrs[i] = NULL;
		if (!g->addrs[i])
			continue; /* a registry group: on_addr() */
		if (raft_addr_of(g->addrs[i], strlen(g->addrs[i]),
				 g->raft_addr[i], sizeof(g->raft_addr[i])) < 0) {
			rft_err("--peers: no namespace log port above %s",
				g->addrs[i]);
			return -EINVAL;
		}
		addrs[i] = g->raft_addr[i];
	}
	/* What the registry publishes for this node: --listen. */
	if (!addrs[g->self])
		addrs[g->self] = g->raft_listen;
	lo.self = g->self;
	lo.nodes = g->members; /* every voter */
	lo.incarnation = g->incarnation;
	lo.addrs = addrs;
	lo.listen = g->raft_listen;
	lo.dir = g->state_dir;
	lo.secret = &g->secret;
	lo.group = g->cfg.name;
	lo.x = g->x;
	/*
	 * The log compacts itself into a snapshot of the namespace
	 * (engine/nssnap.c) every GRP_SNAPSHOT_EVERY entries (docs/design.md,
	 * "Log snapshots").
	 */
	lo.snapshot_every = GRP_SNAPSHOT_EVERY;
	rc = nslog_new(&lo, &fsm, &g->log);
	if (rc < 0) {
		rft_err("cannot set up the namespace log: %s", strerror(-rc));
		return rc;
	}
	/* A wrong --state-dir stops the daemon now, before it mounts. */
	return nslog_check(g->log);
}

static uint64_t new_incarnation(void)
{
	struct timespec ts;

	/*
	 * Wall-clock nanoseconds: a restarted daemon's is larger than the
	 * one before it on the same machine, which makes logs readable;
	 * only "different" is relied on.
	 */
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * The registry says where @node's peer transport listens now (the
 * registry thread, no lock held): its raft is one port above.
 */
static void on_addr(void *ctx, int node, const char *addr)
{
	struct grp *g = ctx;
	char raft[GRP_ADDR_MAX];
	int rc;

	if (raft_addr_of(addr, strlen(addr), raft, sizeof(raft)) < 0) {
		rft_warn("registry: node %d's address %s has no namespace "
			 "log port above it: its raft links are not made",
			 node, addr);
		return;
	}
	rc = nslog_set_addr(g->log, node, raft);
	if (rc < 0)
		rft_warn("registry: the namespace log refused %s for node "
			 "%d: %s", raft, node, strerror(-rc));
}

static void on_change(void *ctx, const struct memb_view *v, int node,
		      enum memb_state was, uint64_t was_inc)
{
	struct grp *g = ctx;

	if (node != v->self) {
		/*
		 * A machine that vanished without closing its connections
		 * would keep our link to it "up" until a send timed out:
		 * close it, and the next send makes a new one.
		 */
		if (v->node[node].state == MEMB_DEAD)
			peer_drop(g->x, node);
		return;
	}
	pthread_mutex_lock(&g->lock);
	g->declared_dead = v->node[node].state == MEMB_DEAD;
	pthread_mutex_unlock(&g->lock);
}

/*
 * Append the addresses of @list (checked: grp_config_check) to g->addrs,
 * split in place in a copy kept in *@buf.  0 or -ENOMEM.
 */
static int add_addrs(struct grp *g, const char *list, char **buf)
{
	char *save = NULL, *tok;

	*buf = strdup(list);
	if (!*buf)
		return -ENOMEM;
	for (tok = strtok_r(*buf, ",;", &save); tok;
	     tok = strtok_r(NULL, ",;", &save))
		g->addrs[g->members++] = tok;
	return 0;
}

int grp_new(const struct grp_config *c, struct grp **out)
{
	struct peer_tcp_opts to = { 0 };
	struct memb_opts mo = { 0 };
	char err[256];
	struct grp *g;
	int rc, hb;

	*out = NULL;
	rc = grp_config_check(c, err, sizeof(err));
	if (rc < 0) {
		rft_err("%s", err);
		return rc;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	pthread_mutex_init(&g->lock, NULL);
	g->cfg = *c;
	g->self = c->node;
	g->incarnation = new_incarnation();
	rc = grp_secret_load(c->secret_file, &g->secret);
	if (rc < 0) {
		rft_err("cannot use --secret-file %s: %s", c->secret_file,
			strerror(-rc));
		goto fail;
	}
	if (c->peers) {
		rc = add_addrs(g, c->peers, &g->addr_buf);
		g->nodes = g->members;
		if (rc == 0 && c->witnesses)
			rc = add_addrs(g, c->witnesses, &g->wit_buf);
		if (rc < 0)
			goto fail;
	} else {
		unsigned w = 0;

		if (c->witnesses)
			parse_count(c->witnesses, &w); /* checked */
		g->nodes = (int)c->size;
		g->members = g->nodes + (int)w;
	}
	g->listen = c->listen ? c->listen : g->addrs[g->self];

	to.self = g->self;
	to.nodes = g->members;
	to.incarnation = g->incarnation;
	to.group = c->name;
	to.addrs = g->addrs;
	to.listen = g->listen;
	to.secret = &g->secret;
	to.handshake_ms = GRP_HS_MS;
	to.idle_ms = 10000;
	rc = peer_tcp_new(&to, &g->x);
	if (rc < 0) {
		rft_err("cannot set up the peer transport on %s: %s",
			g->listen, strerror(-rc));
		goto fail;
	}

	/* Ten heartbeats per --dead-after; suspect at half of it. */
	hb = (int)c->dead_after_ms / 10;
	mo.self = g->self;
	mo.nodes = g->members;
	mo.incarnation = g->incarnation;
	mo.addrs = c->peers ? g->addrs : NULL;
	mo.heartbeat_ms = hb < 20 ? 20 : hb > 1000 ? 1000 : hb;
	mo.suspect_ms = (int)c->dead_after_ms / 2;
	mo.dead_ms = (int)c->dead_after_ms;
	mo.registry = c->registry;
	mo.group = c->name;
	mo.listen_addr = g->listen;
	rc = memb_new(&mo, g->x, &g->memb);
	if (rc < 0) {
		rft_err("cannot set up group membership: %s", strerror(-rc));
		goto fail;
	}
	rc = memb_listen(g->memb, on_change, g);
	if (rc < 0)
		goto fail;
	rc = log_new(g);
	if (rc < 0)
		goto fail;
	if (c->registry) {
		rc = memb_listen_addrs(g->memb, on_addr, g);
		if (rc < 0)
			goto fail;
	}
	*out = g;
	return 0;
fail:
	grp_free(g);
	return rc;
}

/* Of @voters raft voters, how many may be lost with a majority left. */
static int ns_tolerates(int voters)
{
	return voters > 0 ? (voters - 1) / 2 : 0;
}

/* --protect's: any M of the nodes (m of the scheme; 0: none). */
static int data_tolerates(const struct grp *g)
{
	struct ers_scheme s;

	return group_scheme(g, &s) > 0 ? s.m : 0;
}

/*
 * At start: a scheme that outlives the namespace is a promise the group
 * cannot keep (past a majority's loss no change, replacement or rebuild
 * can happen), so say so, and what would keep it.
 */
static void warn_tolerance(const struct grp *g)
{
	int d = data_tolerates(g), ns = ns_tolerates(g->members);
	int add = 2 * d + 1 - g->members;

	if (d <= ns)
		return;
	rft_warn("group %s: --protect %s tolerates %d lost node%s, the "
		 "namespace log only %d (a majority of its %d voters must "
		 "live): past %d lost, no change, replacement or rebuild "
		 "can happen; with %d witness%s more (--witnesses), or %d "
		 "data nodes, it tolerates %d in both",
		 g->cfg.name, g->cfg.protect, d, d == 1 ? "" : "s", ns,
		 g->members, ns, add, add == 1 ? "" : "es",
		 2 * d + 1 - (g->members - g->nodes), d);
}


int grp_start(struct grp *g)
{
	int rc = peer_start(g->x);

	if (rc < 0) {
		rft_err("cannot listen for peers on %s: %s", g->listen,
			strerror(-rc));
		return rc;
	}
	rc = memb_start(g->memb);
	if (rc < 0) {
		peer_stop(g->x);
		return rc;
	}
	rc = nslog_start(g->log);
	if (rc < 0) {
		rft_err("cannot start the namespace log in %s: %s",
			g->state_dir, strerror(-rc));
		memb_stop(g->memb);
		peer_stop(g->x);
		return rc;
	}
	g->started = true;
	rft_info("group %s: %s %d of %d data node%s and %d witness%s, "
		 "listening on %s, incarnation %llu%s%s",
		 g->cfg.name, g->cfg.witness ? "witness" : "node", g->self,
		 g->nodes, g->nodes == 1 ? "" : "s", g->members - g->nodes,
		 g->members - g->nodes == 1 ? "" : "es", g->listen,
		 (unsigned long long)g->incarnation,
		 g->cfg.registry ? ", registry " : "",
		 g->cfg.registry ? g->cfg.registry : "");
	rft_info("group %s: namespace log on %s, state in %s", g->cfg.name,
		 g->raft_listen, g->state_dir);
	warn_tolerance(g);
	return 0;
}

void grp_stop(struct grp *g)
{
	if (!g || !g->started)
		return;
	nslog_stop(g->log);
	memb_stop(g->memb);
	peer_stop(g->x);
	g->started = false;
}

void grp_free(struct grp *g)
{
	if (!g)
		return;
	grp_stop(g);
	/* The transport is stopped (or never started): see nslog_free(). */
	nslog_free(g->log);
	memb_free(g->memb);
	peer_free(g->x);
	free(g->addr_buf);
	free(g->wit_buf);
	memset(&g->secret, 0, sizeof(g->secret));
	pthread_mutex_destroy(&g->lock);
	free(g);
}

int grp_force_remove(struct grp *g, const int *nodes, int n, char *msg,
		     size_t len)
{
	struct memb_view *v;
	bool up[GRP_MAX_NODES] = { false };
	int i, rc;

	if (!g->log || !g->started) {
		snprintf(msg, len, "the group has not started");
		return -EAGAIN;
	}
	for (i = 0; i < n; i++) {
		if (nodes[i] >= 0 && nodes[i] < g->members)
			continue;
		snprintf(msg, len, "node %d is not in this group (ids 0 to %d)",
			 nodes[i], g->members - 1);
		return -EINVAL;
	}
	v = malloc(sizeof(*v));
	if (!v) {
		snprintf(msg, len, "out of memory");
		return -ENOMEM;
	}
	memb_get_view(g->memb, v);
	/* Up, or still heard from: a suspect may be alive. */
	for (i = 0; i < v->nodes && i < GRP_MAX_NODES; i++)
		up[i] = i == g->self || v->node[i].state == MEMB_UP ||
			v->node[i].state == MEMB_SUSPECT;
	free(v);
	rc = nslog_force_remove(g->log, nodes, n, up, msg, len);
	if (rc < 0)
		rft_warn("group %s: force-remove refused: %s", g->cfg.name,
			 msg);
	return rc;
}

const char *grp_member_state_name(enum grp_member_state s)
{
	switch (s) {
	case GRP_MEMBER_SELF: return "self";
	case GRP_MEMBER_UNKNOWN: return "unknown";
	case GRP_MEMBER_UP: return "up";
	case GRP_MEMBER_SUSPECT: return "suspect";
	case GRP_MEMBER_DEAD: return "dead";
	case GRP_MEMBER_REBUILDING: return "rebuilding";
	}
	return "?";
}

static enum grp_member_state member_state(enum memb_state s)
{
	switch (s) {
	case MEMB_UP: return GRP_MEMBER_UP;
	case MEMB_SUSPECT: return GRP_MEMBER_SUSPECT;
	case MEMB_DEAD: return GRP_MEMBER_DEAD;
	case MEMB_UNKNOWN: break;
	}
	return GRP_MEMBER_UNKNOWN;
}

int grp_get_info(struct grp *g, struct grp_info *info,
		 struct grp_member_info *m, int max)
{
	struct memb_view *v = malloc(sizeof(*v));
	uint64_t now = rft_now_ms();
	int i, n = 0;

	memset(info, 0, sizeof(*info));
	info->self = g->self;
	info->nodes = g->nodes;
	info->witnesses = g->members - g->nodes;
	info->witness = g->cfg.witness;
	snprintf(info->name, sizeof(info->name), "%s", g->cfg.name);
	info->incarnation = g->incarnation;
	info->registry = g->cfg.registry != NULL;
	info->dead_after_ms = g->cfg.dead_after_ms;
	pthread_mutex_lock(&g->lock);
	info->declared_dead = g->declared_dead;
	pthread_mutex_unlock(&g->lock);
	info->log_leader = -1;
	if (g->log) {
		struct nslog_status ls;

		nslog_get_status(g->log, &ls);
		info->log = true;
		snprintf(info->log_dir, sizeof(info->log_dir), "%s",
			 g->state_dir);
		snprintf(info->log_addr, sizeof(info->log_addr), "%s",
			 g->raft_listen);
		info->log_term = ls.term;
		info->log_leader = ls.leader;
		info->log_is_leader = ls.is_leader;
		info->log_commit_index = ls.commit_index;
		info->log_last_index = ls.last_index;
		info->log_applied_index = ls.applied_index;
		info->log_raft_id = ls.raft_id;
		info->log_voters = ls.voters;
		info->log_auth_failed = ls.auth_failed;
		info->log_bad_handshakes = ls.bad_handshakes;
		info->log_addrs_unknown = ls.addrs_unknown;
	}
	info->voters = info->log_voters > 0 ? info->log_voters : g->members;
	info->tolerates_data = data_tolerates(g);
	info->tolerates_namespace = ns_tolerates(info->voters);
	info->tolerates = info->tolerates_data < info->tolerates_namespace
				  ? info->tolerates_data
				  : info->tolerates_namespace;
	if (!v)
		return 0;
	memb_get_view(g->memb, v);
	info->epoch = v->epoch;
	info->taken_over_by = v->taken_over_by;
	for (i = 0; i < v->nodes && n < max; i++, n++) {
		const struct memb_node *mn = &v->node[i];
		struct grp_member_info *mi = &m[n];
		struct peer_stats ps;

		memset(mi, 0, sizeof(*mi));
		mi->id = i;
		mi->witness = i >= g->nodes;
		snprintf(mi->addr, sizeof(mi->addr), "%s",
			 i == g->self ? g->listen : mn->addr);
		if (i == g->self) {
			mi->state = GRP_MEMBER_SELF;
			mi->incarnation = g->incarnation;
			continue;
		}
		mi->state = member_state(mn->state);
		if (mi->state == GRP_MEMBER_UP && mn->rebuilding)
			mi->state = GRP_MEMBER_REBUILDING;
		mi->incarnation = mn->incarnation;
		mi->heard_ms_ago = mn->last_heard_ms && now > mn->last_heard_ms
					   ? now - mn->last_heard_ms
					   : 0;
		peer_stats(g->x, i, &ps);
		mi->link_up = ps.up;
		mi->frames_out = ps.frames_out;
		mi->bytes_out = ps.bytes_out;
		mi->frames_in = ps.frames_in;
		mi->bytes_in = ps.bytes_in;
		mi->connects = ps.connects;
		mi->auth_failed = ps.auth_failed;
		mi->bad_frames = ps.bad_frames;
		mi->crc_errors = ps.crc_errors;
	}
	free(v);
	return n;
}
