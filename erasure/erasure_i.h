/*
 * erasure_i.h - private to erasure/: shared helpers of the codec files.
 */
#ifndef RFT_ERASURE_I_H
#define RFT_ERASURE_I_H

#include "erasure.h"

/* Record the reason for the failure about to be returned (thread-local). */
void ers_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Check a decode request against k and m: sets lostmask[i] for each lost
 * member. Returns 0, -EINVAL or -ERANGE as ers_decode() documents.
 */
int ers_check_lost(int k, int m, const int *lost, int nlost,
		   uint8_t lostmask[ERS_MAX_K + ERS_MAX_M]);

#endif /* RFT_ERASURE_I_H */
