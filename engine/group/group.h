/*
 * group.h - the sharding group, as the daemon and its control socket see
 * it (issue 8).  The modules behind it are described in group_i.h.
 *
 * A daemon started with --node and --peers (or --registry) is a member of
 * a group: it authenticates its peers with the shared secret, exchanges
 * heartbeats with them and keeps a view of who is up, suspect or dead.
 * Without those options there is no group and nothing here runs.
 *
 * Its members are data nodes (ids 0 to N - 1: they mount, hold files and
 * protect them) and witnesses (ids N to N + W - 1, --witnesses): voters of
 * the namespace log that hold no data, so that a group can keep a
 * majority of voters through as many lost data nodes as --protect
 * tolerates.  Placement, stripes and holders count data nodes only.
 */
#ifndef RFT_GROUP_H
#define RFT_GROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct grp;

#define GRP_MAX_MEMBERS 64	/* nodes in one group */

struct grp_config {
	int node;		/* --node; -1: not in a group */
	const char *peers;	/* --peers "A0,A1,..." (or ';'); index = id */
	const char *listen;	/* --listen ADDR; NULL: this node's entry */
	const char *registry;	/* --registry HOST:PORT[,...] (memcached) */
	const char *name;	/* --group NAME */
	unsigned size;		/* --group-size N (with a registry) */
	const char *secret_file; /* --secret-file */
	unsigned dead_after_ms;	/* --dead-after */
	const char *state_dir;	/* --state-dir; NULL: grp_state_dir_default */
	const char *protect;	/* --protect: none, replicate:R, xor[:K],
				   rs:K+M */
	uint64_t protect_bw;	/* --protect-bw bytes/s; 0: unlimited */
	const char *codec;	/* --codec auto|isal|gpu (xor, rs); NULL: auto */
	/*
	 * --witnesses: the group's namespace-only voters, ids after the data
	 * nodes'; with --peers their addresses "W0,W1,...", with --registry
	 * their number.  NULL: none.
	 */
	const char *witnesses;
	bool witness;		/* --witness: this daemon is one of them */
};

#define GRP_DEAD_AFTER_DEFAULT_MS 5000
#define GRP_NAME_DEFAULT "reftfs"

void grp_config_defaults(struct grp_config *c);

/*
 * Where node @node of group @name keeps its namespace log when no
 * --state-dir is given: /var/lib/reftfs/NAME/nodeID for root, else
 * $XDG_STATE_HOME/reftfs/NAME/nodeID (or ~/.local/state/reftfs/...).
 * 0, -ENOENT (no home to put it in) or -ENAMETOOLONG.
 */
int grp_state_dir_default(const char *name, int node, char *buf,
			  size_t len);

/* true when @c asks for a group at all (--node, --peers or --registry). */
bool grp_wanted(const struct grp_config *c);

/*
 * Check the options alone (no I/O): a clear message in @err and -EINVAL
 * when they do not make a group.
 */
int grp_config_check(const struct grp_config *c, char *err, size_t errlen);

/*
 * Set up the group: the secret (refused unless mode 0600/0400: -EPERM),
 * the transport (listening, -EADDRINUSE), membership and the namespace
 * log (its state dir made, mode 0700, and refused, -EINVAL, when it holds
 * another node's or group's log; locked until grp_free(), and refused at
 * once, -EBUSY, when another daemon holds it).  Logs why it failed.
 * Nothing runs until grp_start().
 */
int grp_new(const struct grp_config *c, struct grp **out);
int grp_start(struct grp *g);
/* Stop talking to peers; then grp_free().  grp_free(NULL) is a no-op. */
void grp_stop(struct grp *g);
void grp_free(struct grp *g);

/* --- what reftfs-admin group shows --------------------------------------- */

enum grp_member_state {
	GRP_MEMBER_SELF,
	GRP_MEMBER_UNKNOWN,	/* not heard from since this daemon started */
	GRP_MEMBER_UP,
	GRP_MEMBER_SUSPECT,
	GRP_MEMBER_DEAD,
	GRP_MEMBER_REBUILDING,	/* up, and bringing its node's files back
				   (it started with empty memory) */
};
const char *grp_member_state_name(enum grp_member_state s);

struct grp_member_info {
	int id;
	bool witness;		/* a namespace-only voter */
	char addr[128];
	enum grp_member_state state;
	uint64_t incarnation;	/* 0 while unknown */
	uint64_t heard_ms_ago;	/* since the last heartbeat; 0 for self */
	bool link_up;		/* this node's connection to it */
	uint64_t frames_out, bytes_out, frames_in, bytes_in;
	uint64_t connects, auth_failed, bad_frames, crc_errors;
};

struct grp_info {
	int self;
	int nodes;		/* data nodes: ids 0 to nodes - 1 */
	int witnesses;		/* ids nodes to nodes + witnesses - 1 */
	bool witness;		/* self is a witness */
	char name[64];
	uint64_t epoch;		/* of this node's view */
	uint64_t incarnation;	/* this daemon's */
	bool registry;		/* membership through memcached */
	unsigned dead_after_ms;
	bool declared_dead;	/* the others declared this node dead and it
				 * has not rejoined yet */
	uint64_t taken_over_by;	/* not 0: a daemon started later took this
				 * node's place (its incarnation) */
	/* The namespace log (every group). */
	bool log;
	char log_dir[PATH_MAX];	/* its state dir */
	char log_addr[128];	/* where this node's raft listens */
	uint64_t log_term;
	int log_leader;		/* node id; -1 while none is known */
	bool log_is_leader;
	uint64_t log_commit_index;
	uint64_t log_last_index;
	uint64_t log_applied_index;
	uint64_t log_raft_id;	/* 0 until it has joined or founded the log */
	int log_voters;
	uint64_t log_auth_failed; /* raft links refused: secret, group, id */
	uint64_t log_bad_handshakes; /* malformed, slow, over limits */
	int log_addrs_unknown;	/* other nodes whose address the registry
				 * has not given yet */
	/*
	 * Nodes the group may lose at once and go on: its data as --protect
	 * says (any M of them: replicate:R R - 1, xor 1, rs:K+M M; none 0),
	 * its namespace while a majority of the log's voters live ((V - 1)
	 * / 2; V the group's nodes and witnesses until the log counts
	 * them).  The group tolerates the smaller.
	 */
	int tolerates_data, tolerates_namespace, tolerates;
	int voters;		/* the V above */
};

/*
 * The group as this node sees it: @info, and up to @max members in @m
 * (every node id, self included).  Returns the number of members.
 */
int grp_get_info(struct grp *g, struct grp_info *info,
		 struct grp_member_info *m, int max);

/*
 * reftfs-admin group force-remove: end the namespace log membership of
 * nodes @nodes[0..@n), lost for good with the log's majority, so that it
 * goes on with the survivors and the lost ids can be replaced (group_i.h,
 * nslog_force_remove, says when it is refused).  0 with what was done in
 * @msg, or -errno with why not.  Sleeps (seconds).
 */
int grp_force_remove(struct grp *g, const int *nodes, int n, char *msg,
		     size_t len);

#endif /* RFT_GROUP_H */
