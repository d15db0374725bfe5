/*
 * erasure.h - reftfs codec layer: CRC32C, XOR / Reed-Solomon / replica
 * codes, stripe and placement math.
 *
 * Pure functions: no I/O, no threads of its own, no allocation on the
 * encode/update/decode path (only ers_codec_new allocates). Buffers are
 * always owned by the caller; the library never keeps a pointer to them
 * past the call that received it.
 *
 * The code arithmetic is ISA-L's (Cauchy matrix from gf_gen_cauchy1_matrix,
 * ec_encode_data, ec_encode_data_update, xor_gen). Every fast path has a
 * plain-C reference twin (ers_*_ref) that the tests compare against byte for
 * byte. A CUDA backend (gpu/) can stand in for ISA-L behind the same calls;
 * it plugs in through struct ers_backend_ops at the end of this file.
 *
 * Stripe layout of one checkpoint over a group of N = k + m nodes
 * ----------------------------------------------------------------
 * Every node keeps its own chunks whole and local. Node n's chunks of a
 * checkpoint fill, in order, the stripes in which n is a data member; a
 * stripe holds one chunk (data or parity) from each node of the group.
 * Member x of stripe s (x < k: data slot x, x >= k: parity row x - k) sits
 * on node (x - s) mod N, i.e. node n is member (n + s) mod N. Parity
 * therefore rotates one node to the left per stripe (RAID-5
 * left-symmetric), and every node holds parity in exactly m of every N
 * stripes, so memory overhead is even: m/k of each node's data.
 *
 *   xor on N = 4 nodes (k = 3, m = 1); Dn.i = node n's chunk i, P = parity
 *
 *              node 0   node 1   node 2   node 3
 *   stripe 0   D0.0 s0  D1.0 s1  D2.0 s2  P
 *   stripe 1   D0.1 s1  D1.1 s2  P        D3.0 s0
 *   stripe 2   D0.2 s2  P        D2.1 s0  D3.1 s1
 *   stripe 3   P        D1.2 s0  D2.2 s1  D3.2 s2
 *   stripe 4   D0.3 s0  D1.3 s1  D2.3 s2  P        (period N repeats)
 *
 *   rs:2+2 on N = 4 (P0, P1 = parity rows 0 and 1)
 *
 *              node 0   node 1   node 2   node 3
 *   stripe 0   D0.0 s0  D1.0 s1  P0       P1
 *   stripe 1   D0.1 s1  P0       P1       D3.0 s0
 *   stripe 2   P0       P1       D2.0 s0  D3.1 s1
 *   stripe 3   P1       D1.1 s0  D2.1 s1  P0
 *
 * A node that writes fewer chunks than the others simply leaves its slots of
 * the later stripes empty: an empty slot is all zeros, which contributes
 * nothing to parity. Stripes never span checkpoints.
 *
 * replicate:r does not stripe; ers_replica_holders() places the r - 1 extra
 * copies of a node's chunks (ring or group placement as in Gemini).
 */
#ifndef RFT_ERASURE_H
#define RFT_ERASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * CRC32C
 */

/*
 * CRC32C (Castagnoli, iSCSI polynomial 0x1EDC6F41, reflected) of @len bytes
 * at @buf, continuing from @crc.  Start a new checksum with crc = 0; the
 * result of one call may be passed as @crc of the next to checksum a buffer
 * in pieces.  ers_crc32c(0, "123456789", 9) == 0xE3069283.
 */
uint32_t ers_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * CRC32C of the concatenation A || B from @crc1 = ers_crc32c(0, A, |A|),
 * @crc2 = ers_crc32c(0, B, |B|) and @len2 = |B|, without touching the
 * bytes: lets per-chunk checksums be rolled up into a file checksum.
 * Costs O(log len2) 32-bit carry-less multiplies, no tables.
 */
uint32_t ers_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* Reference twin of ers_crc32c(): one bit at a time. For tests. */
uint32_t ers_crc32c_ref(uint32_t crc, const void *buf, size_t len);

/* ------------------------------------------------------------------------
 * Schemes
 */

#define ERS_MAX_K 32 /* data chunks per stripe */
#define ERS_MAX_M 8  /* parity chunks (or extra replicas) per stripe */

enum ers_kind {
	ERS_REPLICATE = 1, /* k = 1, m = r - 1 extra copies */
	ERS_XOR,	   /* k data, m = 1 parity = XOR of the data */
	ERS_RS,		   /* k data, m parity, Cauchy Reed-Solomon */
};

/*
 * A protection scheme. Every kind is described as k data + m redundant
 * chunks per stripe, so it tolerates the loss of any m of the k + m chunks
 * and costs m/k extra memory. xor parsed from "xor" has k = 0 until
 * ers_scheme_fit() sizes it to a group (k = N - 1).
 */
struct ers_scheme {
	enum ers_kind kind;
	int k;
	int m;
};

/*
 * Parse "xor", "xor:K" (K data chunks), "rs:K+M" or "replicate:R" into
 * @out. Returns 0, or -EINVAL (with ers_last_error() saying why) for a
 * malformed string or values outside 1 <= k <= ERS_MAX_K,
 * 1 <= m <= ERS_MAX_M.
 */
int ers_scheme_parse(const char *str, struct ers_scheme *out);

/*
 * Write the canonical string for @s ("xor", "rs:4+2", "replicate:2"; xor
 * with a known k is written "xor:K") into @buf of @size bytes, always
 * NUL-terminated when size > 0. Returns the string length, -EINVAL for a bad
 * scheme, -ENOSPC if it did not fit.
 */
int ers_scheme_format(const struct ers_scheme *s, char *buf, size_t size);

/*
 * Size @s to a group of @nodes nodes: xor gets k = nodes - 1; rs and xor
 * must then have k + m <= nodes (at most one chunk per node per stripe;
 * with fewer, the members of a stripe rotate over the group);
 * replicate:r needs r <= nodes. Returns 0 or -EINVAL.
 */
int ers_scheme_fit(struct ers_scheme *s, int nodes);

/*
 * 0 if @s is complete (k known) and within limits, else -EINVAL with
 * ers_last_error() saying why.
 */
int ers_scheme_check(const struct ers_scheme *s);

/*
 * Text of the most recent failure reported by an ers_ call in this thread
 * (thread-local; "" if none yet). Valid until the next failing ers_ call in
 * the same thread.
 */
const char *ers_last_error(void);

/* ------------------------------------------------------------------------
 * Codec
 */

struct ers_codec;

enum ers_backend_kind {
	ERS_BACKEND_ISAL = 0, /* ISA-L on the CPU (the default) */
	ERS_BACKEND_GPU,      /* CUDA; -ENODEV if not built or no device */
	ERS_BACKEND_AUTO,     /* GPU when usable, else ISA-L */
};

struct ers_codec_opts {
	enum ers_backend_kind backend;
	int gpu_device;	  /* CUDA device ordinal, default 0 */
	size_t gpu_slice; /* bytes per chunk staged on the device per step;
			   * 0 = default (4 MiB) */
};

/*
 * Create a codec for @s (complete: see ers_scheme_check) with @opts (NULL =
 * all defaults: ISA-L). Precomputes the coding matrix and ISA-L tables and,
 * for the GPU backend, device staging buffers of (k + m) * gpu_slice bytes.
 * On success *@out owns the codec; free it with ers_codec_free().
 * Returns 0, -EINVAL (bad scheme or options), -ENOMEM, or -ENODEV when the
 * GPU backend was asked for and the build has no CUDA or no device is
 * usable; ers_last_error() says why.
 *
 * A codec is immutable after creation: with the ISA-L backend any number of
 * threads may call ers_encode/update/decode on it at once. The GPU backend
 * serialises calls on one codec internally (one set of staging buffers).
 */
int ers_codec_new(const struct ers_scheme *s, const struct ers_codec_opts *opts,
		  struct ers_codec **out);

/* Free a codec and its backend resources. ers_codec_free(NULL) is a no-op. */
void ers_codec_free(struct ers_codec *c);

/* The scheme the codec was created for (points into the codec). */
const struct ers_scheme *ers_codec_scheme(const struct ers_codec *c);

/* The backend in use: ERS_BACKEND_ISAL or ERS_BACKEND_GPU (never AUTO). */
enum ers_backend_kind ers_codec_backend(const struct ers_codec *c);

/* Name of the backend in use: "isal" or "gpu". */
const char *ers_codec_backend_name(const struct ers_codec *c);

/*
 * Full-stripe encode: from @data[0..k-1], each @len bytes, compute
 * @parity[0..m-1], each @len bytes (overwritten). All pointers are the
 * caller's; parity must not overlap data. Any length and alignment work;
 * 32-byte aligned buffers take ISA-L's fastest XOR path.
 * Returns 0, -EINVAL (NULL pointer), or -EIO from a failing GPU backend
 * (parity contents then unspecified).
 */
int ers_encode(const struct ers_codec *c, size_t len,
	       const uint8_t *const *data, uint8_t *const *parity);

/*
 * Incremental parity update: add to @parity[0..m-1] (each @len bytes,
 * updated in place) the contribution of @delta, a change of data slot
 * @data_index (0 <= data_index < k). Because the code is linear over XOR:
 *   - a chunk arriving into an all-zero slot: delta = the new data;
 *   - removing a chunk (unlink): delta = the old data;
 *   - overwrite: delta = old XOR new (ers_xor_into), or two calls, one with
 *     the old and one with the new data.
 * Starting from all-zero parity, adding every data chunk once, in any
 * order, gives the same bytes as ers_encode(). Returns 0, -EINVAL, -EIO.
 */
int ers_update(const struct ers_codec *c, size_t len, int data_index,
	       const uint8_t *delta, uint8_t *const *parity);

/*
 * ers_update for one parity row: add to @parity_row (row @row of the
 * stripe's parity, 0 <= row < m, @len bytes, in place) the contribution
 * of @delta to data slot @data_index.  What a node that holds one parity
 * row of a stripe does as the stripe's data chunks arrive; the same bytes
 * as row @row of ers_update(), without computing the other rows.
 * Returns 0, -EINVAL, -EIO.
 */
int ers_update_row(const struct ers_codec *c, size_t len, int data_index,
		   int row, const uint8_t *delta, uint8_t *parity_row);

/*
 * Rebuild lost chunks. @chunks holds k + m pointers to @len-byte buffers
 * in stripe member order (data slots 0..k-1, then parity rows 0..m-1).
 * @lost lists @nlost distinct member indices whose buffers are outputs;
 * every other buffer is an intact input and is only read. Lost data and lost
 * parity are both rebuilt. nlost == 0 is a no-op.
 * Returns 0; -ERANGE if nlost > m (the code cannot recover that: nothing is
 * written); -EINVAL for an index out of range, a duplicate, a NULL pointer
 * or nlost < 0; -EIO from a failing GPU backend.
 * Uses about 11 KiB of stack for the decode matrix and tables.
 */
int ers_decode(const struct ers_codec *c, size_t len, const int *lost,
	       int nlost, uint8_t *const *chunks);

/*
 * Make @len bytes at @buf pinned for the codec's backend (cudaHostRegister
 * for the GPU backend, so copies to the device run at DMA speed; a no-op
 * returning 0 for ISA-L). The caller keeps ownership and must call
 * ers_codec_unregister() before freeing @buf. Returns 0 or -errno.
 */
int ers_codec_register(struct ers_codec *c, void *buf, size_t len);
int ers_codec_unregister(struct ers_codec *c, void *buf);

/*
 * Is @kind usable in this process (for the GPU: CUDA device 0)? 0 if so
 * (always for ISAL and AUTO); -ENODEV (GPU not built in, or no usable
 * device) with the reason in ers_last_error().
 */
int ers_backend_probe(enum ers_backend_kind kind);

/* @dst ^= @src over @len bytes (e.g. to form an overwrite delta). */
void ers_xor_into(size_t len, uint8_t *dst, const uint8_t *src);

/* ------------------------------------------------------------------------
 * Reference twins: plain C, bytewise GF(2^8) (polynomial 0x11D, the same
 * field and Cauchy matrix as ISA-L, built here without ISA-L), plain XOR
 * loops. Slow and obviously correct; used by the tests to check every fast
 * path. Same buffer rules and return codes as the fast calls, taking the
 * scheme instead of a codec.
 */
uint8_t ers_gf_mul_ref(uint8_t a, uint8_t b);
int ers_encode_ref(const struct ers_scheme *s, size_t len,
		   const uint8_t *const *data, uint8_t *const *parity);
int ers_update_ref(const struct ers_scheme *s, size_t len, int data_index,
		   const uint8_t *delta, uint8_t *const *parity);
int ers_decode_ref(const struct ers_scheme *s, size_t len, const int *lost,
		   int nlost, uint8_t *const *chunks);

/* ------------------------------------------------------------------------
 * Stripe layout (xor, rs) - see the figure at the top of this file.
 */

struct ers_layout {
	int nodes; /* N >= k + m */
	int k;
	int m;
};

/*
 * Fill @l for scheme @s over a group of @nodes nodes (xor with k = 0 is
 * sized to the group). Returns 0, or -EINVAL for replicate (no stripes: see
 * ers_replica_holders) or when k + m > nodes.  In a group larger than
 * k + m each stripe has k + m members and the other nodes sit it out, in
 * turn: the same rule, (n + s) mod N, with members k + m .. N - 1 absent.
 */
int ers_layout_init(struct ers_layout *l, const struct ers_scheme *s,
		    int nodes);

/*
 * Member index of @node in @stripe: 0..k-1 = data slot, k..k+m-1 = parity
 * row (member - k). Returns the index, -ENOENT when @node is not a member
 * of @stripe (N > k + m), or -EINVAL.
 */
int ers_layout_member(const struct ers_layout *l, uint64_t stripe, int node);

/* Node holding member @member of @stripe. Returns the node or -EINVAL. */
int ers_layout_node(const struct ers_layout *l, uint64_t stripe, int member);

/*
 * Where node @node's data chunk number @chunk goes: *@stripe and data slot
 * *@slot. Chunks fill the node's data stripes in increasing stripe order.
 * Returns 0 or -EINVAL (-ERANGE if the stripe number would overflow).
 */
int ers_layout_locate(const struct ers_layout *l, int node, uint64_t chunk,
		      uint64_t *stripe, int *slot);

/*
 * Inverse of ers_layout_locate: data slot @slot of @stripe is node *@node's
 * chunk number *@chunk. Returns 0 or -EINVAL.
 */
int ers_layout_chunk(const struct ers_layout *l, uint64_t stripe, int slot,
		     int *node, uint64_t *chunk);

/*
 * Number of stripes node @node's first @nchunks chunks reach into (0 for
 * none). A checkpoint's stripe count is the maximum over its nodes.
 */
uint64_t ers_layout_stripes(const struct ers_layout *l, int node,
			    uint64_t nchunks);

/* ------------------------------------------------------------------------
 * A parity holder's stripe (issue 9): its parity row and the members folded
 * into it.  Pure bookkeeping over the caller's row buffer (no locks, no
 * allocation): a member is an opaque @id (the caller's name for a chunk
 * version) with its CRC32C and length, in one data slot; an empty slot
 * reads as zeros.
 */
struct ers_stripe_member {
	uint64_t id;
	uint32_t crc;
	uint32_t len;	/* bytes folded; the rest of the slot is zeros */
	bool in;
};

struct ers_stripe {
	const struct ers_codec *c;
	int k, row;
	size_t len;		/* bytes of a chunk, of the row */
	uint8_t *parity;	/* the caller's row of @len bytes */
	int members;		/* slots with a member */
	struct ers_stripe_member member[ERS_MAX_K];
};

/*
 * Start an empty stripe: parity row @row (0..m-1) of @c's scheme in
 * @parity (@len bytes, zeroed here).  0 or -EINVAL.
 */
int ers_stripe_init(struct ers_stripe *st, const struct ers_codec *c, int row,
		    size_t len, uint8_t *parity);

/*
 * Fold member @id (CRC @crc) with @data (@dlen <= len bytes, the rest
 * zeros) into data slot @slot.  0 folded; 1 that member is folded there
 * already (nothing done: a chunk sent twice); -EEXIST another member holds
 * the slot (unfold or replace it first); -EINVAL; -EIO from the codec.
 */
int ers_stripe_fold(struct ers_stripe *st, int slot, uint64_t id,
		    uint32_t crc, const uint8_t *data, size_t dlen);

/*
 * Take member @id out of @slot, given the bytes it was folded with (@data,
 * @dlen as folded): the slot reads zeros again.  0; -ENOENT when the slot
 * does not hold that member (as folded); -EINVAL; -EIO.
 */
int ers_stripe_unfold(struct ers_stripe *st, int slot, uint64_t id,
		      const uint8_t *data, size_t dlen);

/*
 * Member @old_id of @slot becomes member @id (CRC @crc, @dlen bytes) by one
 * fold of @delta = old XOR new (both zero-padded to @dlen, which must cover
 * the old member's length).  0; -ENOENT; -EINVAL; -EIO.
 */
int ers_stripe_replace(struct ers_stripe *st, int slot, uint64_t old_id,
		       uint64_t id, uint32_t crc, const uint8_t *delta,
		       size_t dlen);

/*
 * Member @id leaves @slot without its bytes (its owner lost them with its
 * memory, so it can never be unfolded): @row, @rlen <= len bytes (zeros
 * past them), the row encoded anew from the other members, becomes the
 * parity.  0; -ENOENT when the slot does not hold that member; -EINVAL.
 */
int ers_stripe_drop(struct ers_stripe *st, int slot, uint64_t id,
		    const uint8_t *row, size_t rlen);

/* Does @slot hold member @id with CRC @crc? */
bool ers_stripe_holds(const struct ers_stripe *st, int slot, uint64_t id,
		      uint32_t crc);

/* ------------------------------------------------------------------------
 * Replica placement (replicate:r), after Gemini (SOSP '23).
 */

enum ers_replica_policy {
	/* node n's copies on n+1 .. n+r-1 (mod N) */
	ERS_REPLICA_RING = 0,
	/*
	 * nodes in groups of r that hold each other's copies; when r does
	 * not divide N, the last group takes the N mod r spare nodes and
	 * uses ring placement inside itself (Gemini's mixed placement).
	 */
	ERS_REPLICA_GROUP,
};

/*
 * The r - 1 nodes that hold copies of @node's chunks, written to
 * @holders[0..r-2] (first choice first). 1 <= r <= nodes, r - 1 <=
 * ERS_MAX_M. Returns 0 or -EINVAL.
 */
int ers_replica_holders(enum ers_replica_policy p, int nodes, int r, int node,
			int *holders);

/*
 * The r - 1 nodes whose chunks @node holds copies of, in @sources[0..r-2]:
 * the inverse of ers_replica_holders (what a replacement for @node must
 * fetch). Returns 0 or -EINVAL.
 */
int ers_replica_sources(enum ers_replica_policy p, int nodes, int r, int node,
			int *sources);

/* ------------------------------------------------------------------------
 * Backend interface, implemented by gpu/ (not for the engine).
 *
 * erasure/ computes every GF(2^8) coefficient matrix (encode, decode,
 * update columns) itself; a backend only applies them to host buffers.
 * Each op returns 0 or -errno and leaves the reason for
 * last_error() in the calling thread. Lengths are arbitrary; buffers are
 * host memory owned by the caller.
 */
struct ers_backend;

struct ers_backend_ops {
	const char *name;
	/* dst = src[0] ^ ... ^ src[nsrc-1]; dst may alias src[0] only. */
	int (*xor_gen)(struct ers_backend *be, size_t len, int nsrc,
		       const uint8_t *const *src, uint8_t *dst);
	/*
	 * dst[r] = sum over j of coef[r * nsrc + j] * src[j] in GF(2^8),
	 * for r < rows; nsrc <= ERS_MAX_K, rows <= ERS_MAX_M.
	 */
	int (*gf_gen)(struct ers_backend *be, size_t len, int nsrc, int rows,
		      const uint8_t *coef, const uint8_t *const *src,
		      uint8_t *const *dst);
	/* dst[r] ^= coef[r] * src, for r < rows. */
	int (*gf_update)(struct ers_backend *be, size_t len, int rows,
			 const uint8_t *coef, const uint8_t *src,
			 uint8_t *const *dst);
	int (*host_register)(struct ers_backend *be, void *buf, size_t len);
	int (*host_unregister)(struct ers_backend *be, void *buf);
	/* Reason for this thread's last failed op. */
	const char *(*last_error)(void);
	void (*free)(struct ers_backend *be);
};

/* Embedded first in a backend's own struct. */
struct ers_backend {
	const struct ers_backend_ops *ops;
};

#ifdef __cplusplus
}
#endif

#endif /* RFT_ERASURE_H */
