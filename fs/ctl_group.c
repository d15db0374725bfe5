/*
 * ctl_group.c - "group": the sharding group as this node sees it, its
 * members, links and counters, protection and rebuild.  "status" shows
 * the same group object and member table (rfs_ctl_fill_group()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_i.h"
#include "group.h"
#include "report.h"

enum {
	GM_NODE,
	GM_ROLE,
	GM_ADDR,
	GM_STATE,
	GM_INC,
	GM_HEARD,
	GM_LINK,
	GM_FOUT,
	GM_BOUT,
	GM_FIN,
	GM_BIN,
	GM_CONNECTS,
	GM_AUTH,
	GM_BAD,
	GM_CRC,
	GM_THERE,
	GM_HERE,
	GM_N
};
_Static_assert(GM_N == CTL_MEMBER_NFIELDS, "ctl_i.h: CTL_MEMBER_NFIELDS");

#define NMEMBER_STATES (GRP_MEMBER_REBUILDING + 1)

static const char *member_state_of(unsigned s)
{
	return grp_member_state_name((enum grp_member_state)s);
}

const struct rep_field rfs_ctl_member_fields[CTL_MEMBER_NFIELDS] = {
	[GM_NODE] = REP_FIELD("node", REP_STRING),
	/* "data" (mounts, holds files) or "witness" (a log voter only). */
	[GM_ROLE] = REP_FIELD("role", REP_STRING),
	[GM_ADDR] = REP_FIELD("address", REP_STRING),
	[GM_STATE] = {
		.key = "state",
		.type = REP_ENUM,
		.metric = REP_GAUGE,
		.prom = "reftfs_peer_state",
		.help = "1 for the state this node sees the peer in.",
		.label = "state",
		.n = NMEMBER_STATES,
		.name_of = member_state_of,
	},
	[GM_INC] = REP_FIELD("incarnation", REP_COUNT),
	[GM_HEARD] = REP_EXPORT("heard_ms_ago", REP_COUNT, REP_GAUGE,
		"reftfs_peer_heard_ms_ago",
		"Milliseconds since the peer's last heartbeat."),
	[GM_LINK] = REP_FIELD("link_up", REP_BOOL),
	[GM_FOUT] = REP_EXPORT("frames_out", REP_COUNT, REP_COUNTER,
		"reftfs_peer_frames_out_total", "Frames sent to the peer."),
	[GM_BOUT] = REP_EXPORT("bytes_out", REP_BYTES, REP_COUNTER,
		"reftfs_peer_bytes_out_total", "Bytes sent to the peer."),
	[GM_FIN] = REP_EXPORT("frames_in", REP_COUNT, REP_COUNTER,
		"reftfs_peer_frames_in_total",
		"Frames received from the peer."),
	[GM_BIN] = REP_EXPORT("bytes_in", REP_BYTES, REP_COUNTER,
		"reftfs_peer_bytes_in_total",
		"Bytes received from the peer."),
	[GM_CONNECTS] = REP_EXPORT("connects", REP_COUNT, REP_COUNTER,
		"reftfs_peer_connects_total",
		"Authenticated links made with the peer."),
	[GM_AUTH] = REP_EXPORT("auth_failed", REP_COUNT, REP_COUNTER,
		"reftfs_peer_auth_failed_total",
		"Handshakes refused (wrong secret, group or id)."),
	[GM_BAD] = REP_EXPORT("bad_frames", REP_COUNT, REP_COUNTER,
		"reftfs_peer_bad_frames_total",
		"Malformed, oversized or out-of-protocol frames dropped."),
	[GM_CRC] = REP_EXPORT("crc_errors", REP_COUNT, REP_COUNTER,
		"reftfs_peer_crc_errors_total",
		"Frames whose CRC32C did not match."),
	[GM_THERE] = REP_EXPORT("copies_there_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_peer_copies_there_bytes",
		"Bytes of this node's files the peer holds copies of."),
	[GM_HERE] = REP_EXPORT("copies_here_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_peer_copies_here_bytes",
		"Bytes of the peer's files this node holds copies of."),
};

enum {
	GR_ENABLED,
	GR_NAME,
	GR_SELF,
	GR_NODES,
	GR_WITNESSES,
	GR_WITNESS,
	GR_EPOCH,
	GR_INC,
	GR_REGISTRY,
	GR_DEAD_AFTER,
	GR_DECLARED_DEAD,
	GR_TAKEN_OVER,
	GR_TAKEN_OVER_BY,
	GR_UP,
	GR_TOL,
	GR_TOL_DATA,
	GR_TOL_NS,
	GR_VOTERS,
	GR_NS_SHORT,
	GR_LOG,
	GR_LOG_DIR,
	GR_LOG_ADDR,
	GR_LOG_ROLE,
	GR_LOG_TERM,
	GR_LOG_LEADER,
	GR_LOG_COMMIT,
	GR_LOG_LAST,
	GR_LOG_APPLIED,
	GR_LOG_RAFT_ID,
	GR_LOG_VOTERS,
	GR_LOG_AUTH,
	GR_LOG_BAD_HS,
	GR_LOG_UNKNOWN,
	GR_LOG_PROPOSED,
	GR_LOG_FAILED,
	GR_LOG_WAITS,
	GR_LOG_WAITS_CAPPED,
	GR_GETS_SERVED,
	GR_GETS_REFUSED,
	GR_PROT_COPIES,
	GR_PROT_ON,
	GR_PROT_SCHEME,
	GR_PAR_ROWS,
	GR_PAR_BYTES,
	GR_PAR_REFUSED,
	GR_PAR_REBUILT,
	GR_PAR_REBUILT_BYTES,
	GR_PAR_REBUILD_FAILED,
	GR_PAR_STALE,
	GR_PAR_ORPHANS_DROPPED,
	GR_PROT_UNPROT,
	GR_PROT_PENDING,
	GR_PROT_FILES,
	GR_PROT_BYTES_SENT,
	GR_PROT_BYTES_HELD,
	GR_PROT_PIECES_HELD,
	GR_PROT_REFUSED,
	GR_PROT_RETRIES,
	GR_PROT_HOLDER_DEAD,
	GR_PROT_LOST,
	GR_PROT_STALLED,
	GR_PROT_STALLED_HOLDER,
	GR_PROT_STALLED_ERR,
	GR_REB_RUNNING,
	GR_REB_FILES,
	GR_REB_DONE,
	GR_REB_FAILED,
	GR_REB_BYTES,
	GR_REB_LOST,
	GR_N
};
_Static_assert(GR_N == CTL_GROUP_NFIELDS, "ctl_i.h: CTL_GROUP_NFIELDS");

const struct rep_field rfs_ctl_group_fields[CTL_GROUP_NFIELDS] = {
	[GR_ENABLED] = REP_FIELD("enabled", REP_BOOL),
	[GR_NAME] = REP_FIELD("name", REP_STRING),
	[GR_SELF] = REP_FIELD("node", REP_COUNT),
	[GR_NODES] = REP_EXPORT("nodes", REP_COUNT, REP_GAUGE,
		"reftfs_group_nodes", "Data nodes in the group."),
	[GR_WITNESSES] = REP_EXPORT("witnesses", REP_COUNT, REP_GAUGE,
		"reftfs_group_witnesses",
		"Witnesses in the group: namespace log voters holding no "
		"data."),
	[GR_WITNESS] = REP_FIELD("witness", REP_BOOL),
	[GR_EPOCH] = REP_EXPORT("epoch", REP_COUNT, REP_COUNTER,
		"reftfs_group_epoch",
		"Changes of this node's view of the group."),
	[GR_INC] = REP_FIELD("incarnation", REP_COUNT),
	[GR_REGISTRY] = REP_FIELD("registry", REP_BOOL),
	[GR_DEAD_AFTER] = REP_FIELD("dead_after_ms", REP_COUNT),
	[GR_DECLARED_DEAD] = REP_EXPORT("declared_dead", REP_BOOL, REP_GAUGE,
		"reftfs_group_declared_dead",
		"1 while the others hold this node dead."),
	[GR_TAKEN_OVER] = REP_EXPORT("taken_over", REP_BOOL, REP_GAUGE,
		"reftfs_group_taken_over",
		"1 once a daemon started later took this node's place."),
	[GR_TAKEN_OVER_BY] = REP_FIELD("taken_over_by", REP_COUNT),
	[GR_UP] = REP_EXPORT("up", REP_COUNT, REP_GAUGE, "reftfs_group_up",
		"Nodes up, this one included."),
	/* Losses the group goes on through (grp_info's tolerates_*). */
	[GR_TOL] = REP_EXPORT("tolerates", REP_COUNT, REP_GAUGE,
		"reftfs_group_tolerates",
		"Nodes the group may lose at once and go on: the smaller of "
		"the next two."),
	[GR_TOL_DATA] = REP_EXPORT("tolerates_data", REP_COUNT, REP_GAUGE,
		"reftfs_group_tolerates_data",
		"Nodes whose loss --protect's copies or parity survive."),
	[GR_TOL_NS] = REP_EXPORT("tolerates_namespace", REP_COUNT,
		REP_GAUGE, "reftfs_group_tolerates_namespace",
		"Nodes the namespace log may lose with a majority of its "
		"voters left."),
	[GR_VOTERS] = REP_FIELD("voters", REP_COUNT),
	/* The namespace tolerates fewer losses than the data. */
	[GR_NS_SHORT] = REP_FIELD("namespace_short", REP_BOOL),
	/* The namespace log (every group). */
	[GR_LOG] = REP_FIELD("log", REP_BOOL),
	[GR_LOG_DIR] = REP_FIELD("log_state_dir", REP_STRING),
	[GR_LOG_ADDR] = REP_FIELD("log_address", REP_STRING),
	/* "leader", "follower" or "none" (no leader known). */
	[GR_LOG_ROLE] = REP_FIELD("log_role", REP_STRING),
	[GR_LOG_TERM] = REP_EXPORT("log_term", REP_COUNT, REP_GAUGE,
		"reftfs_group_log_term",
		"Raft term of the namespace log as this node knows it."),
	[GR_LOG_LEADER] = REP_EXPORT("log_leader", REP_INT, REP_GAUGE,
		"reftfs_group_log_leader",
		"Node id of the namespace log's leader; -1 while none is "
		"known."),
	[GR_LOG_COMMIT] = REP_EXPORT("log_commit_index", REP_COUNT,
		REP_GAUGE, "reftfs_group_log_commit_index",
		"Highest namespace log index known committed."),
	[GR_LOG_LAST] = REP_FIELD("log_last_index", REP_COUNT),
	[GR_LOG_APPLIED] = REP_FIELD("log_applied_index", REP_COUNT),
	[GR_LOG_RAFT_ID] = REP_FIELD("log_raft_id", REP_COUNT),
	[GR_LOG_VOTERS] = REP_FIELD("log_voters", REP_COUNT),
	[GR_LOG_AUTH] = REP_EXPORT("log_auth_failed", REP_COUNT, REP_COUNTER,
		"reftfs_group_log_auth_failed_total",
		"Raft links refused: wrong secret, group or raft id."),
	[GR_LOG_BAD_HS] = REP_EXPORT("log_bad_handshakes", REP_COUNT,
		REP_COUNTER, "reftfs_group_log_bad_handshakes_total",
		"Raft links closed: malformed, too slow or over limits."),
	[GR_LOG_UNKNOWN] = REP_EXPORT("log_addrs_unknown", REP_COUNT,
		REP_GAUGE, "reftfs_group_log_addrs_unknown",
		"Other nodes whose address the registry has not given yet."),
	[GR_LOG_PROPOSED] = REP_EXPORT("log_proposed", REP_COUNT, REP_COUNTER,
		"reftfs_group_log_proposed_total",
		"Namespace changes this node put to the group's log."),
	[GR_LOG_FAILED] = REP_EXPORT("log_failed", REP_COUNT, REP_COUNTER,
		"reftfs_group_log_failed_total",
		"Namespace changes the log did not take (EIO, or a seal "
		"tried again)."),
	[GR_LOG_WAITS] = REP_EXPORT("log_waits", REP_COUNT, REP_COUNTER,
		"reftfs_group_log_waits_total",
		"Peers' changes confirmed applied here (they return then)."),
	[GR_LOG_WAITS_CAPPED] = REP_EXPORT("log_waits_capped", REP_COUNT,
		REP_COUNTER, "reftfs_group_log_waits_capped_total",
		"... confirmed before a moved directory's old name left this "
		"kernel's cache: its invalidation waited 500 ms behind a "
		"request here."),
	[GR_GETS_SERVED] = REP_EXPORT("pieces_served", REP_COUNT, REP_COUNTER,
		"reftfs_group_pieces_served_total",
		"Pieces peers read from this node's memory."),
	[GR_GETS_REFUSED] = REP_EXPORT("pieces_refused", REP_COUNT,
		REP_COUNTER, "reftfs_group_pieces_refused_total",
		"Peers' piece reads refused: not here, or another version."),
	/* Protection (--protect replicate:R) and the rebuild. */
	[GR_PROT_COPIES] = REP_FIELD("protect_copies", REP_COUNT),
	[GR_PROT_ON] = REP_FIELD("protect_on", REP_BOOL),
	[GR_PROT_SCHEME] = REP_FIELD("protect_scheme", REP_STRING),
	/* xor, rs:K+M: parity rows held, reads rebuilt from stripes. */
	[GR_PAR_ROWS] = REP_FIELD("parity_rows", REP_COUNT),
	[GR_PAR_BYTES] = REP_EXPORT("parity_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_parity_bytes",
		"Bytes of parity rows this node holds for the group."),
	[GR_PAR_REFUSED] = REP_EXPORT("parity_refused", REP_COUNT,
		REP_COUNTER, "reftfs_parity_folds_refused_total",
		"Peers' pieces not folded in (no memory, malformed)."),
	[GR_PAR_REBUILT] = REP_EXPORT("parity_rebuilt_pieces", REP_COUNT,
		REP_COUNTER, "reftfs_parity_rebuilt_pieces_total",
		"Pieces read by decoding their stripe (owner gone)."),
	[GR_PAR_REBUILT_BYTES] = REP_EXPORT("parity_rebuilt_bytes", REP_BYTES,
		REP_COUNTER, "reftfs_parity_rebuilt_bytes_total",
		"Bytes read by decoding their stripe."),
	[GR_PAR_REBUILD_FAILED] = REP_EXPORT("parity_rebuild_failed",
		REP_COUNT, REP_COUNTER,
		"reftfs_parity_rebuild_failures_total",
		"Stripe decodes that failed (too many losses, wrong bytes)."),
	[GR_PAR_STALE] = REP_EXPORT("parity_stale", REP_COUNT, REP_GAUGE,
		"reftfs_parity_stale_pieces",
		"Pieces in rows here that their owner lost with its memory, "
		"of seals no longer current: to be taken out here."),
	[GR_PAR_ORPHANS_DROPPED] = REP_EXPORT("parity_orphans_dropped",
		REP_COUNT, REP_COUNTER,
		"reftfs_parity_orphans_dropped_total",
		"Such pieces taken out, each row encoded anew from its other "
		"members."),
	[GR_PROT_UNPROT] = REP_EXPORT("protect_unprotected", REP_COUNT,
		REP_GAUGE, "reftfs_protect_unprotected_files",
		"Files this node owns, sealed, without current copies on "
		"peers."),
	[GR_PROT_PENDING] = REP_FIELD("protect_pending", REP_COUNT),
	[GR_PROT_FILES] = REP_EXPORT("protect_files", REP_COUNT, REP_COUNTER,
		"reftfs_protect_files_total",
		"Files this node protected since it started."),
	[GR_PROT_BYTES_SENT] = REP_EXPORT("protect_bytes_sent", REP_BYTES,
		REP_COUNTER, "reftfs_protect_bytes_sent_total",
		"Bytes of copies sent to peers."),
	[GR_PROT_BYTES_HELD] = REP_EXPORT("protect_bytes_held", REP_BYTES,
		REP_GAUGE, "reftfs_protect_bytes_held",
		"Bytes of copies received and held for peers."),
	[GR_PROT_PIECES_HELD] = REP_FIELD("protect_pieces_held", REP_COUNT),
	[GR_PROT_REFUSED] = REP_EXPORT("protect_pieces_refused", REP_COUNT,
		REP_COUNTER, "reftfs_protect_pieces_refused_total",
		"Peers' pieces not taken (no memory, another seal)."),
	[GR_PROT_RETRIES] = REP_EXPORT("protect_retries", REP_COUNT,
		REP_COUNTER, "reftfs_protect_retries_total",
		"Protections and rebuild rounds tried again."),
	[GR_PROT_HOLDER_DEAD] = REP_FIELD("protect_holder_dead", REP_INT),
	[GR_PROT_LOST] = REP_FIELD("protect_lost", REP_COUNT),
	[GR_PROT_STALLED] = REP_EXPORT("protect_stalled", REP_COUNT,
		REP_GAUGE, "reftfs_protect_stalled_files",
		"Files of this node whose protection a live holder refused "
		"(no memory there): tried again."),
	[GR_PROT_STALLED_HOLDER] = REP_FIELD("protect_stalled_holder",
		REP_INT),
	[GR_PROT_STALLED_ERR] = REP_FIELD("protect_stalled_error",
		REP_STRING),
	[GR_REB_RUNNING] = REP_FIELD("rebuild_running", REP_BOOL),
	[GR_REB_FILES] = REP_FIELD("rebuild_files", REP_COUNT),
	[GR_REB_DONE] = REP_FIELD("rebuild_done", REP_COUNT),
	[GR_REB_FAILED] = REP_EXPORT("rebuild_failed", REP_COUNT, REP_GAUGE,
		"reftfs_rebuild_files_not_back",
		"Files the rebuild could not bring back yet."),
	[GR_REB_BYTES] = REP_FIELD("rebuild_bytes", REP_BYTES),
	[GR_REB_LOST] = REP_FIELD("rebuild_lost", REP_COUNT),
};

void rfs_ctl_fill_group(const struct ctl_req *r, struct rep *rep,
			struct rep_obj *gobj, struct rep_obj *top,
			unsigned tbl)
{
	struct eng_protect_stats ps;
	struct eng_log_stats ls;
	uint64_t there[64], here[64];
	struct grp_member_info *m;
	struct grp_info gi;
	int n, i;
	uint64_t up = 1;
	char id[16];

	rep_set_bool(gobj, GR_ENABLED, r->g != NULL);
	if (!r->g)
		return;
	m = calloc(GRP_MAX_MEMBERS, sizeof(*m));
	if (!m)
		return;
	n = grp_get_info(r->g, &gi, m, GRP_MAX_MEMBERS);
	rep_set_str(gobj, GR_NAME, gi.name);
	rep_set_u64(gobj, GR_SELF, (uint64_t)gi.self);
	rep_set_u64(gobj, GR_NODES, (uint64_t)gi.nodes);
	rep_set_u64(gobj, GR_WITNESSES, (uint64_t)gi.witnesses);
	rep_set_bool(gobj, GR_WITNESS, gi.witness);
	rep_set_u64(gobj, GR_EPOCH, gi.epoch);
	rep_set_u64(gobj, GR_INC, gi.incarnation);
	rep_set_bool(gobj, GR_REGISTRY, gi.registry);
	rep_set_u64(gobj, GR_DEAD_AFTER, gi.dead_after_ms);
	rep_set_bool(gobj, GR_DECLARED_DEAD, gi.declared_dead);
	rep_set_bool(gobj, GR_TAKEN_OVER, gi.taken_over_by != 0);
	rep_set_u64(gobj, GR_TAKEN_OVER_BY, gi.taken_over_by);
	rep_set_u64(gobj, GR_TOL, (uint64_t)gi.tolerates);
	rep_set_u64(gobj, GR_TOL_DATA, (uint64_t)gi.tolerates_data);
	rep_set_u64(gobj, GR_TOL_NS, (uint64_t)gi.tolerates_namespace);
	rep_set_u64(gobj, GR_VOTERS, (uint64_t)gi.voters);
	rep_set_bool(gobj, GR_NS_SHORT,
		     gi.tolerates_namespace < gi.tolerates_data);
	rep_set_bool(gobj, GR_LOG, gi.log);
	if (gi.log) {
		rep_set_str(gobj, GR_LOG_DIR, gi.log_dir);
		rep_set_str(gobj, GR_LOG_ADDR, gi.log_addr);
		rep_set_str(gobj, GR_LOG_ROLE,
			    gi.log_is_leader	    ? "leader"
			    : gi.log_leader >= 0 ? "follower"
						 : "none");
		rep_set_u64(gobj, GR_LOG_TERM, gi.log_term);
		rep_set_int(gobj, GR_LOG_LEADER, gi.log_leader);
		rep_set_u64(gobj, GR_LOG_COMMIT, gi.log_commit_index);
		rep_set_u64(gobj, GR_LOG_LAST, gi.log_last_index);
		rep_set_u64(gobj, GR_LOG_APPLIED, gi.log_applied_index);
		rep_set_u64(gobj, GR_LOG_RAFT_ID, gi.log_raft_id);
		rep_set_u64(gobj, GR_LOG_VOTERS, (uint64_t)gi.log_voters);
		rep_set_u64(gobj, GR_LOG_AUTH, gi.log_auth_failed);
		rep_set_u64(gobj, GR_LOG_BAD_HS, gi.log_bad_handshakes);
		rep_set_u64(gobj, GR_LOG_UNKNOWN,
			    (uint64_t)gi.log_addrs_unknown);
		eng_log_stats(r->e, &ls);
		rep_set_u64(gobj, GR_LOG_PROPOSED, ls.proposed);
		rep_set_u64(gobj, GR_LOG_FAILED, ls.failed);
		rep_set_u64(gobj, GR_LOG_WAITS, ls.waits);
		rep_set_u64(gobj, GR_LOG_WAITS_CAPPED, ls.waits_capped);
		rep_set_u64(gobj, GR_GETS_SERVED, ls.gets_served);
		rep_set_u64(gobj, GR_GETS_REFUSED, ls.gets_refused);
	}
	eng_protect_stats(r->e, &ps);
	rep_set_u64(gobj, GR_PROT_COPIES, ps.copies);
	rep_set_bool(gobj, GR_PROT_ON, ps.scheme[0] != '\0');
	if (ps.scheme[0])
		rep_set_str(gobj, GR_PROT_SCHEME, ps.scheme);
	if (ps.scheme[0] && !ps.copies) {
		rep_set_u64(gobj, GR_PAR_ROWS, ps.parity_rows);
		rep_set_u64(gobj, GR_PAR_BYTES, ps.parity_bytes);
		rep_set_u64(gobj, GR_PAR_REFUSED, ps.parity_refused);
		rep_set_u64(gobj, GR_PAR_REBUILT, ps.pieces_rebuilt);
		rep_set_u64(gobj, GR_PAR_REBUILT_BYTES, ps.bytes_rebuilt);
		rep_set_u64(gobj, GR_PAR_REBUILD_FAILED, ps.rebuilds_failed);
		rep_set_u64(gobj, GR_PAR_STALE, ps.parity_stale);
		rep_set_u64(gobj, GR_PAR_ORPHANS_DROPPED,
			    ps.parity_orphans_dropped);
	}
	if (ps.scheme[0]) {
		rep_set_u64(gobj, GR_PROT_UNPROT, ps.files_unprotected);
		rep_set_u64(gobj, GR_PROT_PENDING, ps.files_pending);
		rep_set_u64(gobj, GR_PROT_FILES, ps.files_protected);
		rep_set_u64(gobj, GR_PROT_BYTES_SENT, ps.bytes_sent);
		rep_set_u64(gobj, GR_PROT_BYTES_HELD, ps.bytes_held);
		rep_set_u64(gobj, GR_PROT_PIECES_HELD, ps.pieces_held);
		rep_set_u64(gobj, GR_PROT_REFUSED, ps.pieces_refused);
		rep_set_u64(gobj, GR_PROT_RETRIES, ps.retries);
		rep_set_int(gobj, GR_PROT_HOLDER_DEAD, ps.holder_dead);
		rep_set_u64(gobj, GR_PROT_LOST, ps.files_lost);
		rep_set_u64(gobj, GR_PROT_STALLED, ps.files_stalled);
		rep_set_int(gobj, GR_PROT_STALLED_HOLDER, ps.stalled_holder);
		if (ps.files_stalled)
			rep_set_str(gobj, GR_PROT_STALLED_ERR,
				    rfs_ctl_err_name(ps.stalled_err));
		rep_set_bool(gobj, GR_REB_RUNNING, ps.rebuilding);
		rep_set_u64(gobj, GR_REB_FILES, ps.rebuild_files);
		rep_set_u64(gobj, GR_REB_DONE, ps.rebuild_done);
		rep_set_u64(gobj, GR_REB_FAILED, ps.rebuild_failed);
		rep_set_u64(gobj, GR_REB_BYTES, ps.rebuild_bytes);
		rep_set_u64(gobj, GR_REB_LOST, ps.rebuild_lost);
	}
	eng_copy_bytes(r->e, there, here);
	for (i = 0; i < n; i++) {
		struct rep_obj *row = rep_row(rep, top, tbl);

		if (!row)
			break;
		if (m[i].state == GRP_MEMBER_UP ||
		    m[i].state == GRP_MEMBER_REBUILDING)
			up++;
		snprintf(id, sizeof(id), "%d", m[i].id);
		rep_set_str(row, GM_NODE, id);
		rep_set_str(row, GM_ROLE, m[i].witness ? "witness" : "data");
		rep_set_str(row, GM_ADDR, m[i].addr);
		rep_set_u64(row, GM_STATE, m[i].state);
		rep_set_u64(row, GM_INC, m[i].incarnation);
		if (m[i].state == GRP_MEMBER_SELF)
			continue;
		if (m[i].state != GRP_MEMBER_UNKNOWN)
			rep_set_u64(row, GM_HEARD, m[i].heard_ms_ago);
		rep_set_bool(row, GM_LINK, m[i].link_up);
		rep_set_u64(row, GM_FOUT, m[i].frames_out);
		rep_set_u64(row, GM_BOUT, m[i].bytes_out);
		rep_set_u64(row, GM_FIN, m[i].frames_in);
		rep_set_u64(row, GM_BIN, m[i].bytes_in);
		rep_set_u64(row, GM_CONNECTS, m[i].connects);
		rep_set_u64(row, GM_AUTH, m[i].auth_failed);
		rep_set_u64(row, GM_BAD, m[i].bad_frames);
		rep_set_u64(row, GM_CRC, m[i].crc_errors);
		if (m[i].id >= 0 && m[i].id < 64) {
			rep_set_u64(row, GM_THERE, there[m[i].id]);
			rep_set_u64(row, GM_HERE, here[m[i].id]);
		}
	}
	rep_set_u64(gobj, GR_UP, up);
	free(m);
}

enum { GRP_GROUP, GRP_MEMBERS, GRP_N };

static const struct rep_field grp_root_fields[GRP_N] = {
	[GRP_GROUP] = REP_GROUP("group", rfs_ctl_group_fields, GR_N),
	[GRP_MEMBERS] = {
		.key = "members",
		.type = REP_TABLE,
		.label = "peer",
		.fields = rfs_ctl_member_fields,
		.n = GM_N,
	},
};

static const struct rep_field grp_root =
	REP_GROUP("group", grp_root_fields, GRP_N);

static const struct rep_col gm_cols[] = {
	{ "", "NODE", 4, 0 },	    { "  ", "ROLE", -7, 0 },
	{ "  ", "ADDRESS", -14, 40 },
	{ "  ", "STATE", -8, 0 },   { "  ", "INCARNATION", 19, 0 },
	{ "  ", "HEARD", 9, 0 },    { "  ", "LINK", -4, 0 },
	{ "  ", "IN", 10, 0 },	    { "  ", "OUT", 10, 0 },
	{ "  ", "OURS THERE", 10, 0 }, { "  ", "THEIRS HERE", 11, 0 },
	{ "  ", "DROPPED", 0, 0 },
};

static const struct rep_row_text gm_rows[] = {
	{ "state=self",
	  (const char *const[]){ "{node}", "{role}", "{address}", "{state}",
				 "{incarnation:n}", "", "", "", "", "", "",
				 "" } },
	{ NULL,
	  (const char *const[]){ "{node}", "{role}", "{address}", "{state}",
				 "{incarnation:n}", "{heard_ms_ago}ms",
				 "{link_up?up|down}", "{bytes_in}",
				 "{bytes_out}", "{copies_there_bytes}",
				 "{copies_here_bytes}",
				 "{auth_failed} auth, {bad_frames} bad, "
				 "{crc_errors} crc" } },
};

static const struct rep_table_text gm_table = {
	"members", gm_cols, 12, gm_rows, 2
};

static const struct rep_text group_text[] = {
	TXT("!group.enabled", "group",
	    "none (a single node: no --node/--peers/--registry)"),
	TXT("group.enabled&!group.witness", "group",
	    "{group.name}, node {group.node} of {group.nodes}, "
	    "{group.up} up, view epoch {group.epoch}"),
	TXT("group.witness", "group",
	    "{group.name}, witness {group.node} (a namespace log voter, no "
	    "data), {group.nodes} data nodes, {group.up} up, view epoch "
	    "{group.epoch}"),
	TXT("group.enabled&group.witnesses", "witnesses",
	    "{group.witnesses}: voters of the namespace log that hold no "
	    "data"),
	TXT("group.enabled&group.declared_dead", "",
	    "DECLARED DEAD by the others: rejoining"),
	TXT("group.enabled&group.taken_over", "",
	    "TAKEN OVER by a daemon started later (incarnation "
	    "{group.taken_over_by}): stop this one"),
	TXT("group.enabled", "tolerates",
	    "{group.tolerates} lost node(s) at once: data any "
	    "{group.tolerates_data} (--protect), namespace any "
	    "{group.tolerates_namespace} of {group.voters} voters"),
	TXT("group.namespace_short", "",
	    "the namespace tolerates fewer than the data: past "
	    "{group.tolerates_namespace} lost, no change, replacement or "
	    "rebuild can happen; witnesses (--witnesses) add voters"),
	TXT("group.enabled", "membership",
	    "{group.registry?memcached registry|static --peers}, "
	    "dead after {group.dead_after_ms} ms"),
	TXT("group.enabled&!group.log", "log", "none"),
	TXT("group.log", "log",
	    "term {group.log_term}, commit index {group.log_commit_index} "
	    "(last {group.log_last_index}, applied "
	    "{group.log_applied_index}), {group.log_voters} voters"),
	TXT("group.log&group.log_role=leader", "",
	    "leader: this node (raft id {group.log_raft_id})"),
	TXT("group.log&group.log_role=follower", "",
	    "leader: node {group.log_leader}; this node follows (raft id "
	    "{group.log_raft_id})"),
	TXT("group.log&group.log_role=none&group.log_raft_id", "",
	    "no leader known (an election, or too few nodes up)"),
	TXT("group.log&!group.log_raft_id&group.log_addrs_unknown", "",
	    "not running yet: waiting for the registry to name every node "
	    "({group.log_addrs_unknown} unknown)"),
	TXT("group.log&!group.log_raft_id&!group.log_addrs_unknown", "",
	    "not running yet: the group's first start needs every node up "
	    "once; a wiped node waits for a leader to join"),
	TXT("group.log&group.log_raft_id&group.log_addrs_unknown", "",
	    "no raft link yet to {group.log_addrs_unknown} node(s): the "
	    "registry has not named them"),
	TXT("group.log", "",
	    "raft on {group.log_address}, {group.log_auth_failed} links "
	    "refused (authentication), {group.log_bad_handshakes} bad "
	    "handshakes"),
	TXT("group.log", "log dir", "{group.log_state_dir}"),
	TXT("group.enabled&!group.protect_on", "protection", "none"),
	TXT("group.protect_on", "protection",
	    "{group.protect_scheme}: "
	    "{group.protect_unprotected} files of this node not protected, "
	    "{group.protect_files} protected since start, "
	    "{group.protect_bytes_sent} sent, {group.protect_bytes_held} "
	    "held for peers, {group.protect_retries} retries"),
	TXT("group.protect_on&group.protect_lost", "",
	    "{group.protect_lost} files of this node lost (reftfs-admin "
	    "protect names them)"),
	TXT("group.protect_on&group.protect_stalled", "",
	    "{group.protect_stalled} files refused by node "
	    "{group.protect_stalled_holder} ({group.protect_stalled_error}): "
	    "tried again"),
	TXT("group.protect_on&!group.protect_copies", "parity",
	    "{group.parity_bytes} in {group.parity_rows} "
	    "{group.parity_rows?row|rows} held for the group, "
	    "{group.parity_rebuilt_bytes} read by decoding stripes, "
	    "{group.parity_rebuild_failed} decodes failed"),
	TXT("group.protect_on&group.parity_stale", "",
	    "{group.parity_stale} {group.parity_stale?piece|pieces} that a "
	    "node lost with its memory still counted in rows here: being "
	    "taken out"),
	TXT("group.protect_on&group.rebuild_running", "rebuild",
	    "running: {group.rebuild_done}/{group.rebuild_files} files, "
	    "{group.rebuild_bytes} back, {group.rebuild_failed} not back "
	    "yet"),
	TXT("group.protect_on&!group.rebuild_running&group.rebuild_files",
	    "rebuild",
	    "done: {group.rebuild_files} files, {group.rebuild_bytes} "
	    "back"),
	TXT("group.protect_on&group.rebuild_lost", "",
	    "{group.rebuild_lost} files found lost: not brought back"),
	TXT("group.enabled", NULL, ""),
	TABLE("members", &gm_table),
};

/*
 * group force-remove NODE...: the operator's step after a lost majority
 * (docs/operations.md, "Forced recovery").
 */
static int force_remove(struct ctl_req *r, struct rep_out *o)
{
	int nodes[CTL_MAX_WORDS], n = 0, rc;
	char msg[512];

	if (!r->g) {
		rep_out_line(o, 'e', "group force-remove: not in a group");
		return CTL_EXIT_FAIL;
	}
	for (int i = 1; i < r->nwords; i++) {
		char *end;
		long v = strtol(r->words[i], &end, 10);

		if (!*r->words[i] || *end || v < 0 || v >= GRP_MAX_MEMBERS) {
			rep_out_line(o, 'e',
				     "group force-remove: '%s' is not a node "
				     "id", r->words[i]);
			return CTL_EXIT_USAGE;
		}
		nodes[n++] = (int)v;
	}
	if (!n) {
		rep_out_line(o, 'e', "usage: group force-remove NODE...");
		return CTL_EXIT_USAGE;
	}
	rc = grp_force_remove(r->g, nodes, n, msg, sizeof(msg));
	if (rc < 0) {
		rep_out_line(o, 'e', "group force-remove: refused: %s", msg);
		return CTL_EXIT_FAIL;
	}
	rep_out_line(o, 'o', "group force-remove: %s", msg);
	return CTL_EXIT_OK;
}

int rfs_ctl_cmd_group(struct ctl_req *r, struct rep_out *o)
{
	struct rep *rep;
	struct rep_obj *top;

	if (r->nwords) {
		if (!strcmp(r->words[0], "force-remove"))
			return force_remove(r, o);
		rep_out_line(o, 'e', "group: unknown subcommand '%s' (try "
				     "force-remove)", r->words[0]);
		return CTL_EXIT_USAGE;
	}
	rep = rep_new(&grp_root);

	if (!rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	top = rep_top(rep);
	rfs_ctl_fill_group(r, rep, rep_obj(top, GRP_GROUP), top, GRP_MEMBERS);
	if (rep_err(rep))
		o->err = rep_err(rep);
	else if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, group_text,
			 sizeof(group_text) / sizeof(group_text[0]), 12);
	rep_free(rep);
	return CTL_EXIT_OK;
}
