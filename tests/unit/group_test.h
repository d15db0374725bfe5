/*
 * group_test.h - the group's parts that only the unit tests link: the fake
 * transport (peer_fake.c) and a cut of raft's links (nslog.c built with
 * RFT_TEST_HOOKS).  tests/unit/meson.build builds them into libraries of
 * their own; reftfsd's libraries carry neither.
 */
#ifndef RFT_GROUP_TEST_H
#define RFT_GROUP_TEST_H

#include "group_i.h"

/*
 * The fake transport: endpoints in one process joined by a fake network.
 * Frames between two endpoints arrive in order, after a delay drawn from
 * [min_ms, max_ms]; a link can be cut (frames in flight are lost, both
 * sides see link down) and healed; a killed node's endpoint receives and
 * sends nothing until revived.  Every random choice comes from @seed.
 */
struct peer_fakenet;
struct peer_fakenet *peer_fakenet_new(int nodes, uint64_t seed);
void peer_fakenet_free(struct peer_fakenet *net);
int peer_fake_new(struct peer_fakenet *net, int self, uint64_t incarnation,
		  struct peer_xport **out);
void peer_fakenet_delay(struct peer_fakenet *net, int min_ms, int max_ms);
/* Each frame breaks its link with probability @p (frame lost, link down). */
void peer_fakenet_drop(struct peer_fakenet *net, double p);
/* Cut (true) or heal (false) the link between @a and @b. */
void peer_fakenet_cut(struct peer_fakenet *net, int a, int b, bool cut);
/* Cut every link between side[i] == 0 nodes and side[i] == 1 nodes. */
void peer_fakenet_partition(struct peer_fakenet *net, const int *side);
void peer_fakenet_heal(struct peer_fakenet *net);
/*
 * Stop (@frozen) or resume delivery to and from @node, as a hung daemon:
 * frames to it wait and arrive when it thaws; its sends wait for the thaw
 * until their timeout (-ETIMEDOUT).
 */
void peer_fakenet_freeze(struct peer_fakenet *net, int node, bool frozen);
/*
 * The address peer_set_addr() last gave fake endpoint @x for @node ("" if
 * none), copied into @buf (@len bytes).  0, -EINVAL (not a fake endpoint),
 * -ENAMETOOLONG.
 */
int peer_fake_addr(struct peer_xport *x, int node, char *buf, size_t len);

/*
 * Refuse (@cut) or allow again raft's links between this node and @node,
 * and close those already made, as a network partition would.  The peer
 * transport (o->x) is not touched.  Only in nslog.c built with
 * RFT_TEST_HOOKS (nslog_hooks_dep).
 */
void nslog_test_cut(struct nslog *l, int node, bool cut);

#endif
