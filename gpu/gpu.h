/*
 * gpu.h - CUDA backend of the codec layer (built only when CUDA is found;
 * RFT_HAVE_CUDA is defined for users of gpu_dep then).
 *
 * The engine does not call the codec functions here: it asks
 * ers_codec_new() for ERS_BACKEND_GPU or ERS_BACKEND_AUTO, which opens this
 * backend through struct ers_backend_ops. What is public here is device
 * probing and pinning of host memory (the T0 arena) outside any codec.
 */
#ifndef RFT_GPU_H
#define RFT_GPU_H

#include <stddef.h>

#include "erasure.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default bytes per chunk staged on the device per step. */
#define GPU_DEFAULT_SLICE ((size_t)4 << 20)

/*
 * 0 if CUDA device @device can be used by this process (a context could be
 * created on it); -ENODEV otherwise, with the reason in gpu_last_error().
 */
int gpu_probe(int device);

/* Text of this thread's last gpu_ failure ("" if none). Thread-local. */
const char *gpu_last_error(void);

/*
 * Open a codec backend on @device with staging buffers for @max_src input
 * and @max_dst output chunks of @slice bytes each (0 = GPU_DEFAULT_SLICE;
 * rounded up to 256 bytes), i.e. (max_src + max_dst) * slice bytes of
 * device memory, allocated here and never on the data path. Any length is
 * processed in slices. *@out is freed through (*out)->ops->free.
 * Returns 0, -EINVAL, -ENODEV (no device), -ENOMEM (device memory) or -EIO.
 */
int gpu_backend_new(int device, size_t slice, int max_src, int max_dst,
		    struct ers_backend **out);

/*
 * Pin @len bytes at @buf (cudaHostRegister, portable to every device) so
 * transfers run as DMA without a staging copy. The caller owns @buf and
 * must unpin it before freeing it. Returns 0, -EINVAL, -EEXIST (already
 * pinned), -ENODEV or -EIO.
 */
int gpu_host_register(void *buf, size_t len);

/* Undo gpu_host_register(). Returns 0, -EINVAL, -ENOENT (not pinned), -EIO. */
int gpu_host_unregister(void *buf);

#ifdef __cplusplus
}
#endif

#endif /* RFT_GPU_H */
