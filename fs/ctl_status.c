/*
 * ctl_status.c - "status", "metrics" and "version": the daemon as a
 * whole.  status and metrics are one report (status_report()), filled
 * once from the engine, the FUSE session and the group, and rendered as
 * text or JSON (status) or Prometheus text (metrics).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_i.h"
#include "report.h"

#ifndef RFT_VERSION
#define RFT_VERSION "unknown"
#endif

/* --- status and metrics: one report ------------------------------------- */

enum {
	MEM_BUDGET,
	MEM_USED,
	MEM_PREFAULTED,
	MEM_LOCKED,
	MEM_PERCENT,
	MEM_CHUNK,
	MEM_CHUNKS,
	MEM_CHUNKS_USED,
	MEM_EVICTABLE,
	MEM_OWN,
	MEM_COPIES,
	MEM_CACHED,
	MEM_PARITY,
	MEM_SMALL_CHUNKS,
	MEM_SMALL_BYTES,
	MEM_N
};

static const struct rep_field mem_fields[MEM_N] = {
	[MEM_BUDGET] = REP_EXPORT("budget_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_budget_bytes", "Memory budget for file data."),
	[MEM_USED] = REP_EXPORT("used_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_used_bytes", "Arena memory in use."),
	[MEM_PREFAULTED] = REP_EXPORT("prefaulted_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_prefaulted_bytes",
		"Arena memory faulted in ahead of use."),
	[MEM_LOCKED] = REP_EXPORT("locked_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_locked_bytes",
		"Memory locked in RAM, never swapped (--lock-memory)."),
	[MEM_PERCENT] = REP_FIELD("used_percent", REP_PERCENT),
	[MEM_CHUNK] = REP_EXPORT("chunk_size_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_chunk_size_bytes", "Size of one arena chunk."),
	[MEM_CHUNKS] = REP_EXPORT("chunks_total", REP_COUNT, REP_GAUGE,
		"reftfs_chunks", "Chunks in the arena."),
	[MEM_CHUNKS_USED] = REP_EXPORT("chunks_used", REP_COUNT, REP_GAUGE,
		"reftfs_chunks_used", "Arena chunks in use."),
	[MEM_EVICTABLE] = REP_EXPORT("chunks_evictable", REP_COUNT, REP_GAUGE,
		"reftfs_chunks_evictable",
		"Chunks in use that could be evicted now."),
	[MEM_OWN] = REP_EXPORT("data_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_data_bytes",
		"Arena memory holding this node's files."),
	[MEM_COPIES] = REP_EXPORT("copies_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_copies_bytes",
		"Arena memory holding copies of other nodes' files."),
	[MEM_CACHED] = REP_EXPORT("cached_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_cached_bytes",
		"Arena memory holding other nodes' pieces fetched by readers."),
	[MEM_PARITY] = REP_EXPORT("parity_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_parity_bytes",
		"Arena memory holding parity rows for the group."),
	[MEM_SMALL_CHUNKS] = REP_EXPORT("small_chunks", REP_COUNT, REP_GAUGE,
		"reftfs_memory_small_chunks",
		"Arena chunks shared by small pieces (slabs)."),
	[MEM_SMALL_BYTES] = REP_EXPORT("small_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_memory_small_bytes",
		"Bytes of the blocks small pieces take in shared chunks."),
};

enum { NS_CKPTS, NS_FILES, NS_DIRS, NS_LOGICAL, NS_RESIDENT, NS_LOST,
       NS_N };

static const struct rep_field ns_fields[NS_N] = {
	[NS_CKPTS] = REP_EXPORT("checkpoints", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoints", "Checkpoints (top-level directories)."),
	[NS_FILES] = REP_EXPORT("files", REP_COUNT, REP_GAUGE, "reftfs_files",
		"Regular files."),
	[NS_DIRS] = REP_EXPORT("dirs", REP_COUNT, REP_GAUGE,
		"reftfs_directories", "Directories."),
	[NS_LOGICAL] = REP_EXPORT("logical_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_logical_bytes", "Sum of file sizes."),
	[NS_RESIDENT] = REP_EXPORT("resident_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_resident_bytes", "File bytes resident in RAM."),
	[NS_LOST] = REP_EXPORT("lost_files", REP_COUNT, REP_GAUGE,
		"reftfs_files_lost",
		"Files whose data is gone for good: no copy, parity row or "
		"persisted copy was left when their owner lost its memory "
		"(a write or an unlink of one ends it)."),
};

enum { IO_WOPS, IO_WBYTES, IO_ROPS, IO_RBYTES, IO_N };

static const struct rep_field io_fields[IO_N] = {
	[IO_WOPS] = REP_EXPORT("write_ops", REP_COUNT, REP_COUNTER,
		"reftfs_write_ops_total", "Write requests."),
	[IO_WBYTES] = REP_EXPORT("write_bytes", REP_BYTES, REP_COUNTER,
		"reftfs_write_bytes_total", "Bytes written."),
	[IO_ROPS] = REP_EXPORT("read_ops", REP_COUNT, REP_COUNTER,
		"reftfs_read_ops_total", "Read requests."),
	[IO_RBYTES] = REP_EXPORT("read_bytes", REP_BYTES, REP_COUNTER,
		"reftfs_read_bytes_total", "Bytes read."),
};

enum { FU_LIBFUSE, FU_PROTO, FU_URING, FU_PASS, FU_PASS_IN_PLACE, FU_PASS_HELD,
       FU_PASS_WAITING, FU_N };

static const struct rep_field fuse_fields[FU_N] = {
	[FU_LIBFUSE] = REP_FIELD("libfuse", REP_STRING),
	[FU_PROTO] = REP_FIELD("kernel_protocol", REP_STRING),
	[FU_URING] = REP_EXPORT("io_uring", REP_BOOL, REP_GAUGE,
		"reftfs_fuse_io_uring",
		"1 once FUSE requests come over io_uring (--io-uring)."),
	[FU_PASS] = REP_EXPORT("passthrough", REP_BOOL, REP_GAUGE,
		"reftfs_fuse_passthrough",
		"1 when large sealed files may pass through (the default; "
		"--no-passthrough: 0)."),
	[FU_PASS_IN_PLACE] = REP_EXPORT("passthrough_in_place", REP_BOOL,
		REP_GAUGE, "reftfs_fuse_passthrough_in_place",
		"1 when large files are written into their backing files "
		"(the default with passthrough; --no-in-place: 0)."),
	[FU_PASS_HELD] = REP_EXPORT("passthrough_held_bytes", REP_BYTES,
		REP_GAUGE, "reftfs_fuse_passthrough_held_bytes",
		"Budget held by backing files of files passing through now."),
	[FU_PASS_WAITING] = REP_EXPORT("passthrough_waiting", REP_COUNT,
		REP_GAUGE, "reftfs_fuse_passthrough_waiting",
		"Sealed files whose copy waits for the writes to stop."),
};

enum {
	CNT_ENOSPC,
	CNT_CRC,
	CNT_EVICTED,
	CNT_RT_CHUNKS,
	CNT_RT_BYTES,
	CNT_PEER_BYTES,
	CNT_FETCH_READS,
	CNT_FETCH_TIMEOUTS,
	CNT_FETCH_STALLS,
	CNT_READS_UNCACHED,
	CNT_PROTECTED_VERSIONS,
	CNT_PERSISTED_VERSIONS,
	CNT_LOST_VERSIONS,
	CNT_PASS_OPENS,
	CNT_PASS_FILES,
	CNT_PASS_BYTES,
	CNT_PASS_REUSED,
	CNT_PASS_EARLY,
	CNT_PASS_EARLY_USED,
	CNT_PASS_PLACED,
	CNT_PASS_PLACED_USED,
	CNT_PASS_NO_SPARE,
	CNT_N
};

static const struct rep_field cnt_fields[CNT_N] = {
	[CNT_ENOSPC] = REP_EXPORT("enospc", REP_COUNT, REP_COUNTER,
		"reftfs_enospc_total", "Writes that failed with ENOSPC."),
	[CNT_CRC] = REP_EXPORT("crc_errors", REP_COUNT, REP_COUNTER,
		"reftfs_crc_errors_total",
		"Chunks that failed their CRC32C check."),
	[CNT_EVICTED] = REP_EXPORT("evicted_chunks", REP_COUNT, REP_COUNTER,
		"reftfs_evicted_chunks_total", "Chunks evicted from RAM."),
	[CNT_RT_CHUNKS] = REP_EXPORT("readthrough_chunks", REP_COUNT,
		REP_COUNTER, "reftfs_readthrough_chunks_total",
		"Chunks read back from the persist tier."),
	[CNT_RT_BYTES] = REP_EXPORT("readthrough_bytes", REP_BYTES, REP_COUNTER,
		"reftfs_readthrough_bytes_total",
		"Bytes read back from the persist tier."),
	[CNT_PEER_BYTES] = REP_EXPORT("peer_bytes", REP_BYTES, REP_COUNTER,
		"reftfs_peer_fetched_bytes_total",
		"Bytes of pieces brought into memory from peers: their "
		"copies, or decoded from their stripes."),
	[CNT_FETCH_READS] = REP_EXPORT("fetch_reads", REP_COUNT, REP_COUNTER,
		"reftfs_fetch_reads_total",
		"Reads answered from a fetch thread (data not in RAM)."),
	[CNT_FETCH_TIMEOUTS] = REP_EXPORT("fetch_timeouts", REP_COUNT,
		REP_COUNTER, "reftfs_fetch_timeouts_total",
		"Reads that failed ETIMEDOUT waiting for their data."),
	[CNT_FETCH_STALLS] = REP_EXPORT("fetch_stalls", REP_COUNT,
		REP_COUNTER, "reftfs_fetch_stalls_total",
		"Pieces brought in from peers or the persist dir while memory "
		"was full (evicted for, waited for, or not kept)."),
	[CNT_READS_UNCACHED] = REP_EXPORT("reads_uncached", REP_COUNT,
		REP_COUNTER, "reftfs_reads_uncached_total",
		"Reads served without keeping their copy: memory full of what "
		"may not be evicted."),
	[CNT_PROTECTED_VERSIONS] = REP_EXPORT("protected_versions",
		REP_COUNT, REP_COUNTER, "reftfs_protected_versions_total",
		"Files' versions that became protected across the group."),
	[CNT_PERSISTED_VERSIONS] = REP_EXPORT("persisted_versions",
		REP_COUNT, REP_COUNTER, "reftfs_persisted_versions_total",
		"Files' versions whose persisted copy became whole (data and "
		"metadata)."),
	[CNT_LOST_VERSIONS] = REP_EXPORT("lost_versions", REP_COUNT,
		REP_COUNTER, "reftfs_lost_versions_total",
		"Files' versions the group's log found nowhere (lost)."),
	[CNT_PASS_OPENS] = REP_EXPORT("passthrough_opens", REP_COUNT,
		REP_COUNTER, "reftfs_passthrough_opens_total",
		"Opens that passed through to a backing file."),
	[CNT_PASS_FILES] = REP_EXPORT("passthrough_files", REP_COUNT,
		REP_COUNTER, "reftfs_passthrough_files_total",
		"Files copied to a backing file to pass through."),
	[CNT_PASS_BYTES] = REP_EXPORT("passthrough_bytes", REP_BYTES,
		REP_COUNTER, "reftfs_passthrough_bytes_total",
		"Bytes copied to backing files."),
	[CNT_PASS_REUSED] = REP_EXPORT("passthrough_reused", REP_COUNT,
		REP_COUNTER, "reftfs_passthrough_reused_total",
		"Copies made over a spare backing file's pages."),
	[CNT_PASS_EARLY] = REP_EXPORT("passthrough_early_bytes", REP_BYTES,
		REP_COUNTER, "reftfs_passthrough_early_bytes_total",
		"Bytes copied to backing files while their files were written."),
	[CNT_PASS_EARLY_USED] = REP_EXPORT("passthrough_early_used_bytes",
		REP_BYTES, REP_COUNTER,
		"reftfs_passthrough_early_used_bytes_total",
		"Of the bytes copied early, those a copy at seal found unchanged."),
	[CNT_PASS_PLACED] = REP_EXPORT("passthrough_placed_bytes", REP_BYTES,
		REP_COUNTER, "reftfs_passthrough_placed_bytes_total",
		"Pieces written in place, into their files' backing files."),
	[CNT_PASS_PLACED_USED] = REP_EXPORT("passthrough_placed_used_bytes",
		REP_BYTES, REP_COUNTER,
		"reftfs_passthrough_placed_used_bytes_total",
		"Of the bytes written in place, those a copy at seal used."),
	[CNT_PASS_NO_SPARE] = REP_EXPORT("passthrough_no_spare", REP_COUNT,
		REP_COUNTER, "reftfs_passthrough_no_spare_total",
		"In place: copies not made, their file's name having no spare "
		"and the budget no room for one."),
};

enum {
	PER_ENABLED,
	PER_DIR,
	PER_HEALTHY,
	PER_FILES,
	PER_BYTES,
	PER_ERRORS,
	PER_PENDING_FILES,
	PER_PENDING_BYTES,
	PER_LAST_ERROR,
	PER_LAST_ERROR_TIME,
	PER_LAST_OK_TIME,
	PER_KEEP,
	PER_EVERY,
	PER_N
};

static const struct rep_field persist_fields[PER_N] = {
	[PER_ENABLED] = REP_EXPORT("enabled", REP_BOOL, REP_GAUGE,
		"reftfs_persist_enabled", "1 if a persist tier is configured."),
	[PER_DIR] = REP_FIELD("dir", REP_STRING),
	[PER_HEALTHY] = REP_EXPORT("healthy", REP_BOOL, REP_GAUGE,
		"reftfs_persist_healthy",
		"1 if the last write-back succeeded."),
	[PER_FILES] = REP_EXPORT("written_files", REP_COUNT, REP_COUNTER,
		"reftfs_persist_written_files_total",
		"Files written back to the persist tier."),
	[PER_BYTES] = REP_EXPORT("written_bytes", REP_BYTES, REP_COUNTER,
		"reftfs_persist_written_bytes_total",
		"Bytes written back to the persist tier."),
	[PER_ERRORS] = REP_EXPORT("errors", REP_COUNT, REP_COUNTER,
		"reftfs_persist_errors_total", "Failed write-back attempts."),
	[PER_PENDING_FILES] = REP_EXPORT("pending_files", REP_COUNT, REP_GAUGE,
		"reftfs_persist_pending_files",
		"Files waiting for write-back."),
	[PER_PENDING_BYTES] = REP_EXPORT("pending_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_persist_pending_bytes",
		"Bytes waiting for write-back."),
	[PER_LAST_ERROR] = REP_FIELD("last_error", REP_STRING),
	[PER_LAST_ERROR_TIME] = REP_EXPORT("last_error_time", REP_TIME,
		REP_GAUGE, "reftfs_persist_last_error_time_seconds",
		"Unix time of the last write-back error, 0 if none."),
	[PER_LAST_OK_TIME] = REP_EXPORT("last_ok_time", REP_TIME, REP_GAUGE,
		"reftfs_persist_last_success_time_seconds",
		"Unix time of the last successful write-back, 0 if none."),
	[PER_KEEP] = REP_FIELD("keep", REP_COUNT),
	[PER_EVERY] = REP_FIELD("persist_every", REP_COUNT),
};

/* The spill tier (--spill). */
enum {
	SP_ENABLED,
	SP_DIR,
	SP_BUDGET,
	SP_USED,
	SP_PIECES,
	SP_WRITTEN,
	SP_READ,
	SP_CRC_ERRORS,
	SP_ERRORS,
	SP_FOUND,
	SP_N
};

static const struct rep_field spill_fields[SP_N] = {
	[SP_ENABLED] = REP_EXPORT("enabled", REP_BOOL, REP_GAUGE,
		"reftfs_spill_enabled", "1 if a spill dir is configured."),
	[SP_DIR] = REP_FIELD("dir", REP_STRING),
	[SP_BUDGET] = REP_EXPORT("budget_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_spill_budget_bytes",
		"Bytes the spill dir may take on disk."),
	[SP_USED] = REP_EXPORT("used_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_spill_bytes",
		"Bytes the spill files take on disk."),
	[SP_PIECES] = REP_EXPORT("pieces", REP_COUNT, REP_GAUGE,
		"reftfs_spill_pieces",
		"Pieces of files held in the spill dir only."),
	[SP_WRITTEN] = REP_EXPORT("written_pieces", REP_COUNT, REP_COUNTER,
		"reftfs_spill_written_pieces_total",
		"Pieces written to the spill dir."),
	[SP_READ] = REP_EXPORT("read_pieces", REP_COUNT, REP_COUNTER,
		"reftfs_spill_read_pieces_total",
		"Pieces read back from the spill dir."),
	[SP_CRC_ERRORS] = REP_EXPORT("crc_errors", REP_COUNT, REP_COUNTER,
		"reftfs_spill_crc_errors_total",
		"Pieces of the spill dir that failed their check (read "
		"from the holders or the persist dir instead, else EIO)."),
	[SP_ERRORS] = REP_EXPORT("errors", REP_COUNT, REP_COUNTER,
		"reftfs_spill_errors_total",
		"Failed writes to the spill dir (the pieces stayed in RAM)."),
	[SP_FOUND] = REP_EXPORT("found_pieces", REP_COUNT, REP_GAUGE,
		"reftfs_spill_found_pieces",
		"Pieces this daemon found in the spill dir at its start, "
		"taken back instead of fetched."),
};

enum { CK_FLAG_KEEP = 1 << 0, CK_FLAG_PERSIST = 1 << 1 };

static const char *const ck_flag_names[] = { "keep", "persist" };
static const char *const ck_flag_keys[] = { "keep", "persist_selected" };

const char *rfs_ctl_ckpt_state_of(unsigned s)
{
	return s == ENG_STATE_LOST ? "incomplete" : rfs_ctl_state_of(s);
}

const struct rep_field rfs_ctl_ckpt_fields[CK_N] = {
	[CK_NAME] = REP_FIELD("name", REP_STRING),
	[CK_SEQ] = REP_EXPORT("seq", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_seq",
		"Creation order of the checkpoint, from 1."),
	[CK_STATE] = {
		.key = "state",
		.type = REP_ENUM,
		.metric = REP_GAUGE,
		.prom = "reftfs_checkpoint_state",
		.help = "1 for the checkpoint's state (the weakest of its "
			"files; incomplete: one is lost).",
		.label = "state",
		.n = NSTATES,
		.name_of = rfs_ctl_ckpt_state_of,
	},
	[CK_FILES] = REP_EXPORT("files", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_files", "Files in the checkpoint."),
	[CK_BYTES] = REP_EXPORT("bytes", REP_BYTES, REP_GAUGE,
		"reftfs_checkpoint_bytes",
		"Sum of the checkpoint's file sizes."),
	[CK_RESIDENT] = REP_EXPORT("resident_bytes", REP_BYTES, REP_GAUGE,
		"reftfs_checkpoint_resident_bytes",
		"Bytes of the checkpoint resident in RAM."),
	[CK_FLAGS] = {
		.key = "flags",
		.type = REP_FLAGS,
		.metric = REP_GAUGE,
		.prom = "reftfs_checkpoint_flag",
		.help = "1 if the checkpoint is in the keep window "
			"(flag=\"keep\") or selected for write-back "
			"(flag=\"persist\").",
		.label = "flag",
		.n = 2,
		.names = ck_flag_names,
		.keys = ck_flag_keys,
	},
	[CK_LOST] = REP_EXPORT("lost_files", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_lost_files",
		"Files of the checkpoint whose data is gone for good."),
	[CK_WRITING] = REP_EXPORT("writing_files", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_writing_files",
		"Files of the checkpoint open for writing."),
	[CK_SEALED] = REP_EXPORT("sealed_files", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_sealed_files",
		"Files of the checkpoint sealed (or protected, or persisted)."),
	[CK_PROTECTED] = REP_EXPORT("protected_files", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_protected_files",
		"Files of the checkpoint that survive a node's loss: protected "
		"across the group, or persisted."),
	[CK_PERSISTED] = REP_EXPORT("persisted_files", REP_COUNT, REP_GAUGE,
		"reftfs_checkpoint_persisted_files",
		"Files of the checkpoint in the persist dir."),
};

void rfs_ctl_ckpt_fill(struct rep_obj *row, const struct eng_ckpt_info *ci)
{
	rep_set_str(row, CK_NAME, ci->name ? ci->name : "");
	rep_set_u64(row, CK_SEQ, ci->seq);
	rep_set_u64(row, CK_STATE, ci->state);
	rep_set_u64(row, CK_FILES, ci->files);
	rep_set_u64(row, CK_LOST, ci->files_lost);
	rep_set_u64(row, CK_BYTES, ci->bytes);
	rep_set_u64(row, CK_RESIDENT, ci->bytes_resident);
	rep_set_u64(row, CK_FLAGS,
		    (ci->in_keep_window ? CK_FLAG_KEEP : 0) |
			    (ci->persist_selected ? CK_FLAG_PERSIST : 0));
	rep_set_u64(row, CK_WRITING, ci->files_writing);
	rep_set_u64(row, CK_SEALED, ci->files_sealed);
	rep_set_u64(row, CK_PROTECTED, ci->files_protected);
	rep_set_u64(row, CK_PERSISTED, ci->files_persisted);
}

enum {
	ST_MOUNT,
	ST_SOCKET,
	ST_VERSION,
	ST_PROTOCOL,
	ST_PID,
	ST_START,
	ST_UPTIME,
	ST_MEMORY,
	ST_NS,
	ST_IO,
	ST_FUSE,
	ST_COUNTERS,
	ST_PERSIST,
	ST_SPILL,
	ST_GROUP,
	ST_CKPTS,
	ST_MEMBERS,
	ST_N
};

static const struct rep_field status_fields[ST_N] = {
	[ST_MOUNT] = REP_FIELD("mountpoint", REP_STRING),
	[ST_SOCKET] = REP_FIELD("socket", REP_STRING),
	[ST_VERSION] = {
		.key = "version",
		.type = REP_STRING,
		.metric = REP_INFO,
		.prom = "reftfs_build_info",
		.help = "Version of reftfsd; the value is always 1.",
		.label = "version",
	},
	[ST_PROTOCOL] = REP_FIELD("protocol", REP_COUNT),
	[ST_PID] = REP_FIELD("pid", REP_INT),
	[ST_START] = REP_EXPORT("start_time", REP_TIME, REP_GAUGE,
		"reftfs_start_time_seconds", "Unix time reftfsd started."),
	[ST_UPTIME] = REP_FIELD("uptime_seconds", REP_SECONDS),
	[ST_MEMORY] = REP_GROUP("memory", mem_fields, MEM_N),
	[ST_NS] = REP_GROUP("namespace", ns_fields, NS_N),
	[ST_IO] = REP_GROUP("io", io_fields, IO_N),
	[ST_FUSE] = REP_GROUP("fuse", fuse_fields, FU_N),
	[ST_COUNTERS] = REP_GROUP("counters", cnt_fields, CNT_N),
	[ST_PERSIST] = REP_GROUP("persist", persist_fields, PER_N),
	[ST_SPILL] = REP_GROUP("spill", spill_fields, SP_N),
	[ST_GROUP] = REP_GROUP("group", rfs_ctl_group_fields,
			       CTL_GROUP_NFIELDS),
	[ST_CKPTS] = {
		.key = "checkpoints",
		.type = REP_TABLE,
		.label = "checkpoint",
		.fields = rfs_ctl_ckpt_fields,
		.n = CK_N,
	},
	[ST_MEMBERS] = {
		.key = "members",
		.type = REP_TABLE,
		.label = "peer",
		.fields = rfs_ctl_member_fields,
		.n = CTL_MEMBER_NFIELDS,
	},
};

static const struct rep_field status_root =
	REP_GROUP("status", status_fields, ST_N);

static const struct rep_col ck_cols[] = {
	{ "", "CHECKPOINT", -10, 40 }, { " ", "SEQ", 6, 0 },
	{ "  ", "STATE", -9, 0 },	       { "  ", "FILES", 8, 0 },
	{ "  ", "BYTES", 10, 0 },	       { "  ", "RESIDENT", 10, 0 },
	{ "  ", "FLAGS", 0, 0 },
};

static const struct rep_row_text ck_rows[] = {
	{ "lost_files",
	  (const char *const[]){ "{name}", "{seq}", "{state}", "{files}",
				 "{bytes}", "{resident_bytes}",
				 "{flags}  {lost_files} lost" } },
	{ NULL, (const char *const[]){ "{name}", "{seq}", "{state}", "{files}",
				       "{bytes}", "{resident_bytes}",
				       "{flags}" } },
};

static const struct rep_table_text ck_table = {
	"checkpoints", ck_cols, 7, ck_rows, 2
};

/* What "status" says, field by field; docs/protocol.md shows it. */
static const struct rep_text status_text[] = {
	TXT(NULL, "mount", "{mountpoint}"),
	TXT(NULL, "daemon", "reftfsd {version}, pid {pid}"),
	TXT(NULL, "socket", "{socket}"),
	TXT("start_time", "uptime", "{uptime_seconds} (since {start_time})"),
	TXT(NULL, "memory",
	    "{memory.used_bytes} of {memory.budget_bytes} used "
	    "({memory.used_percent})"),
	/* Until the arena is faulted in, first writes run slower. */
	TXT("memory.prefaulted_bytes<memory.budget_bytes", "",
	    "{memory.prefaulted_bytes} of the budget faulted in ahead of use"),
	TXT("memory.locked_bytes", "",
	    "{memory.locked_bytes} locked in RAM (--lock-memory)"),
	TXT(NULL, "chunks",
	    "{memory.chunk_size_bytes} each; {memory.chunks_used} of "
	    "{memory.chunks_total} in use, {memory.chunks_evictable} "
	    "evictable"),
	TXT(NULL, "holding",
	    "{memory.data_bytes} this node's data, {memory.copies_bytes} "
	    "copies for peers, {memory.parity_bytes} parity, "
	    "{memory.cached_bytes} fetched by readers"),
	TXT("memory.small_chunks", "small pieces",
	    "{memory.small_bytes} in blocks of {memory.small_chunks} shared "
	    "chunk{memory.small_chunks?|s}"),
	TXT(NULL, "contents",
	    "{namespace.checkpoints} checkpoint{namespace.checkpoints?|s}, "
	    "{namespace.files} file{namespace.files?|s}, {namespace.dirs} "
	    "director{namespace.dirs?y|ies}"),
	TXT(NULL, "data",
	    "{namespace.logical_bytes} logical, {namespace.resident_bytes} "
	    "resident in RAM"),
	TXT("namespace.lost_files", "lost",
	    "{namespace.lost_files} file{namespace.lost_files?|s} whose data "
	    "is gone for good: no copy, parity or persisted copy left "
	    "(reftfs-admin ls shows them)"),
	TXT(NULL, "io",
	    "{io.write_ops} writes ({io.write_bytes}), {io.read_ops} reads "
	    "({io.read_bytes})"),
	TXT("fuse.kernel_protocol", "fuse",
	    "libfuse {fuse.libfuse}, kernel FUSE {fuse.kernel_protocol}, "
	    "requests over {fuse.io_uring?io_uring|/dev/fuse}"),
	TXT("fuse.passthrough", "",
	    "passthrough on: {counters.passthrough_opens} opens, "
	    "{counters.passthrough_files} files copied "
	    "({counters.passthrough_bytes}; "
	    "{counters.passthrough_reused} over spare pages, "
	    "{counters.passthrough_early_bytes} while written, "
	    "{counters.passthrough_early_used_bytes} of them used; "
	    "{counters.passthrough_placed_used_bytes} of "
	    "{counters.passthrough_placed_bytes} written in place used, "
	    "{counters.passthrough_no_spare} not copied for want of room"
	    "{fuse.passthrough_in_place?| (in place off)}), "
	    "{fuse.passthrough_held_bytes} held now, "
	    "{fuse.passthrough_waiting} files waiting for the writes to stop"),
	TXT("!persist.enabled", "persist", "disabled (no --persist directory)"),
	TXT("persist.enabled", "persist",
	    "{persist.dir}, {persist.healthy?healthy|FAILING}"),
	TXT("persist.enabled", "",
	    "{persist.written_files} files ({persist.written_bytes}) written, "
	    "{persist.pending_files} files ({persist.pending_bytes}) pending, "
	    "{persist.errors} errors"),
	TXT("persist.enabled&persist.persist_every", "",
	    "policy --persist-every {persist.persist_every}, --keep "
	    "{persist.keep}"),
	TXT("persist.enabled&!persist.persist_every", "",
	    "policy write back on flush and unmount only, --keep "
	    "{persist.keep}"),
	TXT("persist.enabled&persist.last_ok_time", "",
	    "last success {persist.last_ok_time} "
	    "({persist.last_ok_time:ago})"),
	TXT("persist.enabled&persist.last_error", "",
	    "last error {persist.last_error_time} "
	    "({persist.last_error_time:ago}): {persist.last_error}"),
	TXT("spill.enabled", "spill",
	    "{spill.dir}: {spill.pieces} pieces there now, "
	    "{spill.used_bytes} of {spill.budget_bytes} taken; "
	    "{spill.written_pieces} written, {spill.read_pieces} read back, "
	    "{spill.crc_errors} failed their check, {spill.errors} write "
	    "errors; {spill.found_pieces} found at start"),
	TXT(NULL, "counters",
	    "enospc {counters.enospc}, crc errors {counters.crc_errors}, "
	    "evicted chunks {counters.evicted_chunks}, read-through "
	    "{counters.readthrough_chunks} chunks "
	    "({counters.readthrough_bytes}), {counters.fetch_reads} reads "
	    "fetched, {counters.fetch_timeouts} timed out"),
	TXT(NULL, "",
	    "versions protected {counters.protected_versions}, persisted "
	    "{counters.persisted_versions}, lost {counters.lost_versions}"),
	/* Reads slowed by memory full: the operator's cue to add --mem. */
	TXT("counters.fetch_stalls", "",
	    "memory full: {counters.fetch_stalls} pieces brought in while "
	    "full, {counters.reads_uncached} reads served without keeping "
	    "their copy"),
	TXT("group.enabled", "group",
	    "{group.name}, node {group.node} of {group.nodes}, {group.up} up, "
	    "view epoch {group.epoch} (reftfs-admin group)"),
	TXT("group.enabled&group.declared_dead", "",
	    "DECLARED DEAD by the others: rejoining"),
	TXT("group.enabled&group.taken_over", "",
	    "TAKEN OVER by a daemon started later (incarnation "
	    "{group.taken_over_by}): stop this one"),
	TXT("group.log&!group.log_role=none", "",
	    "namespace log term {group.log_term}, leader node "
	    "{group.log_leader}, commit index {group.log_commit_index}"),
	TXT("group.log&group.log_role=none", "",
	    "namespace log term {group.log_term}, no leader, commit index "
	    "{group.log_commit_index}"),
	TXT(NULL, NULL, ""),
	TXT("!checkpoints", NULL, "no checkpoints"),
	TABLE("checkpoints", &ck_table),
};

#define STATUS_LABEL_W 14

static int ck_row(void *ctx, const struct eng_ckpt_info *ci)
{
	struct rep *rep = ctx;
	struct rep_obj *row = rep_row(rep, rep_top(rep), ST_CKPTS);

	if (!row)
		return 1;
	rfs_ctl_ckpt_fill(row, ci);
	return 0;
}

static void fill_fuse(const struct rfs_fuse_info *f, struct rep_obj *g)
{
	unsigned proto;
	char buf[32];

	if (!f)
		return;
	proto = atomic_load_explicit(&f->proto, memory_order_relaxed);
	rep_set_str(g, FU_LIBFUSE, f->libfuse);
	if (proto) {
		snprintf(buf, sizeof(buf), "%u.%u", proto >> 16,
			 proto & 0xffff);
		rep_set_str(g, FU_PROTO, buf);
	}
	rep_set_bool(g, FU_URING,
		     atomic_load_explicit(&f->io_uring, memory_order_relaxed));
}

/*
 * The report behind "status" and "metrics", filled once.  Returns NULL
 * with an 'e' line in @o (or o->err set) when it cannot be had.
 */
static struct rep *status_report(struct ctl_req *r, struct rep_out *o)
{
	const struct eng_config *cfg = eng_get_config(r->e);
	struct rep *rep = rep_new(&status_root);
	struct rep_obj *top, *g;
	struct eng_stats st;
	time_t now = time(NULL);
	int rc;

	if (!rep) {
		o->err = -ENOMEM;
		return NULL;
	}
	top = rep_top(rep);
	memset(&st, 0, sizeof(st));
	eng_get_stats(r->e, &st);
	st.persist_last_error[sizeof(st.persist_last_error) - 1] = '\0';

	rep_set_str(top, ST_MOUNT, cfg->mountpoint && *cfg->mountpoint
					   ? cfg->mountpoint
					   : NULL);
	rep_set_str(top, ST_SOCKET, r->sock);
	rep_set_str(top, ST_VERSION, RFT_VERSION);
	rep_set_u64(top, ST_PROTOCOL, RFS_CTL_PROTOCOL);
	rep_set_int(top, ST_PID, getpid());
	rep_set_int(top, ST_START, st.start_time);
	rep_set_u64(top, ST_UPTIME, now > st.start_time
					    ? (uint64_t)(now - st.start_time)
					    : 0);

	g = rep_obj(top, ST_MEMORY);
	rep_set_u64(g, MEM_BUDGET, st.mem_budget);
	rep_set_u64(g, MEM_USED, st.mem_used);
	rep_set_u64(g, MEM_PREFAULTED, st.mem_prefaulted);
	rep_set_u64(g, MEM_LOCKED, st.mem_locked);
	rep_set_pct(g, MEM_PERCENT,
		    st.mem_budget ? 100.0 * (double)st.mem_used /
					    (double)st.mem_budget
				  : 0.0);
	rep_set_u64(g, MEM_CHUNK, st.chunk_size);
	rep_set_u64(g, MEM_CHUNKS, st.chunks_total);
	rep_set_u64(g, MEM_CHUNKS_USED, st.chunks_used);
	rep_set_u64(g, MEM_EVICTABLE, st.chunks_evictable);
	rep_set_u64(g, MEM_OWN, st.mem_own);
	rep_set_u64(g, MEM_COPIES, st.mem_copies);
	rep_set_u64(g, MEM_CACHED, st.mem_cached);
	rep_set_u64(g, MEM_PARITY, st.mem_parity);
	rep_set_u64(g, MEM_SMALL_CHUNKS, st.small_slabs);
	rep_set_u64(g, MEM_SMALL_BYTES, st.small_bytes);

	g = rep_obj(top, ST_NS);
	rep_set_u64(g, NS_CKPTS, st.checkpoints);
	rep_set_u64(g, NS_FILES, st.files);
	rep_set_u64(g, NS_DIRS, st.dirs);
	rep_set_u64(g, NS_LOGICAL, st.bytes_logical);
	rep_set_u64(g, NS_RESIDENT, st.bytes_resident);
	rep_set_u64(g, NS_LOST, st.files_lost);

	g = rep_obj(top, ST_IO);
	rep_set_u64(g, IO_WOPS, st.write_ops);
	rep_set_u64(g, IO_WBYTES, st.write_bytes);
	rep_set_u64(g, IO_ROPS, st.read_ops);
	rep_set_u64(g, IO_RBYTES, st.read_bytes);

	fill_fuse(r->fuse, rep_obj(top, ST_FUSE));
	rep_set_bool(rep_obj(top, ST_FUSE), FU_PASS, st.pass_enabled);
	rep_set_bool(rep_obj(top, ST_FUSE), FU_PASS_IN_PLACE, st.pass_in_place);
	rep_set_u64(rep_obj(top, ST_FUSE), FU_PASS_HELD, st.pass_held_bytes);
	rep_set_u64(rep_obj(top, ST_FUSE), FU_PASS_WAITING, st.pass_waiting);

	g = rep_obj(top, ST_COUNTERS);
	rep_set_u64(g, CNT_ENOSPC, st.enospc);
	rep_set_u64(g, CNT_CRC, st.crc_errors);
	rep_set_u64(g, CNT_EVICTED, st.evicted_chunks);
	rep_set_u64(g, CNT_RT_CHUNKS, st.readthrough_chunks);
	rep_set_u64(g, CNT_RT_BYTES, st.readthrough_bytes);
	rep_set_u64(g, CNT_PEER_BYTES, st.peer_bytes);
	rep_set_u64(g, CNT_FETCH_READS, st.fetch_reads);
	rep_set_u64(g, CNT_FETCH_TIMEOUTS, st.fetch_timeouts);
	rep_set_u64(g, CNT_FETCH_STALLS, st.fetch_stalls);
	rep_set_u64(g, CNT_READS_UNCACHED, st.reads_uncached);
	rep_set_u64(g, CNT_PROTECTED_VERSIONS, st.protected_versions);
	rep_set_u64(g, CNT_PERSISTED_VERSIONS, st.persisted_versions);
	rep_set_u64(g, CNT_LOST_VERSIONS, st.lost_versions);
	rep_set_u64(g, CNT_PASS_OPENS, st.pass_opens);
	rep_set_u64(g, CNT_PASS_FILES, st.pass_files);
	rep_set_u64(g, CNT_PASS_BYTES, st.pass_bytes);
	rep_set_u64(g, CNT_PASS_REUSED, st.pass_reused);
	rep_set_u64(g, CNT_PASS_EARLY, st.pass_early_bytes);
	rep_set_u64(g, CNT_PASS_EARLY_USED, st.pass_early_used);
	rep_set_u64(g, CNT_PASS_PLACED, st.pass_placed_bytes);
	rep_set_u64(g, CNT_PASS_PLACED_USED, st.pass_placed_used);
	rep_set_u64(g, CNT_PASS_NO_SPARE, st.pass_no_spare);

	g = rep_obj(top, ST_PERSIST);
	rep_set_bool(g, PER_ENABLED, st.persist_enabled);
	if (st.persist_enabled && cfg->persist_dir && *cfg->persist_dir)
		rep_set_str(g, PER_DIR, cfg->persist_dir);
	rep_set_bool(g, PER_HEALTHY, st.persist_healthy);
	rep_set_u64(g, PER_FILES, st.persist_files);
	rep_set_u64(g, PER_BYTES, st.persist_bytes);
	rep_set_u64(g, PER_ERRORS, st.persist_errors);
	rep_set_u64(g, PER_PENDING_FILES, st.persist_pending_files);
	rep_set_u64(g, PER_PENDING_BYTES, st.persist_pending_bytes);
	if (st.persist_last_error[0])
		rep_set_str(g, PER_LAST_ERROR, st.persist_last_error);
	rep_set_int(g, PER_LAST_ERROR_TIME, st.persist_last_error_time);
	rep_set_int(g, PER_LAST_OK_TIME, st.persist_last_ok_time);
	rep_set_u64(g, PER_KEEP, cfg->keep);
	rep_set_u64(g, PER_EVERY, cfg->persist_every);

	g = rep_obj(top, ST_SPILL);
	rep_set_bool(g, SP_ENABLED, st.spill_enabled);
	if (st.spill_enabled && cfg->spill_dir)
		rep_set_str(g, SP_DIR, cfg->spill_dir);
	rep_set_u64(g, SP_BUDGET, st.spill_budget);
	rep_set_u64(g, SP_USED, st.spill_used);
	rep_set_u64(g, SP_PIECES, st.spill_pieces);
	rep_set_u64(g, SP_WRITTEN, st.spill_written);
	rep_set_u64(g, SP_READ, st.spill_read);
	rep_set_u64(g, SP_CRC_ERRORS, st.spill_crc_errors);
	rep_set_u64(g, SP_ERRORS, st.spill_errors);
	rep_set_u64(g, SP_FOUND, st.spill_found);

	rfs_ctl_fill_group(r, rep, rep_obj(top, ST_GROUP), top, ST_MEMBERS);

	rc = eng_list_checkpoints(r->e, ck_row, rep);
	if (rep_err(rep)) {
		o->err = rep_err(rep);
	} else if (rc < 0) {
		rep_out_line(o, 'e', "%s: listing checkpoints: %s",
			     r->cmd->name, rfs_ctl_err_name(rc));
	} else {
		return rep;
	}
	rep_free(rep);
	return NULL;
}

int rfs_ctl_cmd_status(struct ctl_req *r, struct rep_out *o)
{
	struct rep *rep = status_report(r, o);

	if (!rep)
		return CTL_EXIT_FAIL;
	if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, status_text,
			 sizeof(status_text) / sizeof(status_text[0]),
			 STATUS_LABEL_W);
	rep_free(rep);
	return CTL_EXIT_OK;
}

int rfs_ctl_cmd_metrics(struct ctl_req *r, struct rep_out *o)
{
	struct rep *rep = status_report(r, o);

	if (!rep)
		return CTL_EXIT_FAIL;
	rep_prom(o, rep, r->json);
	rep_free(rep);
	return CTL_EXIT_OK;
}

/* --- version ------------------------------------------------------------ */

enum { VER_VERSION, VER_PROTOCOL, VER_PID, VER_N };

static const struct rep_field version_fields[VER_N] = {
	[VER_VERSION] = REP_FIELD("version", REP_STRING),
	[VER_PROTOCOL] = REP_FIELD("protocol", REP_COUNT),
	[VER_PID] = REP_FIELD("pid", REP_INT),
};

static const struct rep_field version_root =
	REP_GROUP("version", version_fields, VER_N);

static const struct rep_text version_text[] = {
	TXT(NULL, NULL,
	    "reftfsd {version}, control protocol {protocol}, pid {pid}"),
};

int rfs_ctl_cmd_version(struct ctl_req *r, struct rep_out *o)
{
	struct rep *rep = rep_new(&version_root);
	struct rep_obj *top;

	if (!rep) {
		o->err = -ENOMEM;
		return CTL_EXIT_FAIL;
	}
	top = rep_top(rep);
	rep_set_str(top, VER_VERSION, RFT_VERSION);
	rep_set_u64(top, VER_PROTOCOL, RFS_CTL_PROTOCOL);
	rep_set_int(top, VER_PID, getpid());
	if (rep_err(rep))
		o->err = rep_err(rep);
	else if (r->json)
		rep_json(o, rep);
	else
		rep_text(o, rep, version_text, 1, 0);
	rep_free(rep);
	return CTL_EXIT_OK;
}
