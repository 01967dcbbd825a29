// SPDX-License-Identifier: GPL-2.0
// zmesh capture: redirect an enrolled pod's TCP connects to ztunnel's in-pod outbound
// listener, remember where they were going, and drop TCP reaching the pod's own sockets
// from outside the pod. See bpf/README.md for maps, hooks, ports and keys.
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ZM_OUTBOUND_PORT 15001
#define ZM_ORIG_DST_MAX 16384 /* bound on in-flight captured connects per pod */
#define ZM_EXEMPT_MAX 64      /* bound on probe-source exemptions per pod */
#define LOOPBACK_IFINDEX 1    /* lo is always ifindex 1 in every netns */

char LICENSE[] SEC("license") = "GPL";

/* Original destination. Addresses in network byte order, port in host byte order.
 * family is the family on the wire (4 also for an IPv4-mapped address on an AF_INET6
 * socket, which reaches ztunnel's IPv4 listener); mapped says the socket was AF_INET6. */
struct zm_dst {
	__u32 addr[4]; /* IPv4 in addr[0] */
	__u16 port;
	__u8 family;
	__u8 mapped;
};

/* Key under which ztunnel finds a connection from the socket it accepted. */
struct zm_key {
	__u64 netns_cookie;
	__u16 port; /* client local port, host byte order */
	__u8 family;
	__u8 pad[5];
};

/* Per-socket record from connect to close; frees itself with the socket. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct zm_dst);
} zm_sock_dst SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ZM_ORIG_DST_MAX);
	__type(key, struct zm_key);
	__type(value, struct zm_dst);
} zm_orig_dst SEC(".maps");

/* Source addresses (IPv4 as ::ffff:a.b.c.d) allowed to reach pod sockets directly. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZM_EXEMPT_MAX);
	__type(key, __u32[4]);
	__type(value, __u8);
} zm_exempt SEC(".maps");

/* [0] packets dropped by strict inbound, [1] connects captured, [2] connects the
 * sock_ops program could not re-key (no per-socket record), [3] connects refused by
 * the connect throttle. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} zm_counters SEC(".maps");

/* Connect throttle: ztunnel arms it for each connection-rate token it takes for the pod
 * (with the tokens its tenant has left) and each one it refuses (empty). Until until_ns
 * the connect hooks keep that token bucket (rate per second, burst), a mirror of the
 * tenant's: connects with a token go on to
 * ztunnel, the others fail with EPERM in connect() before a SYN is sent, so a storm over
 * its quota costs ztunnel nothing and a pod that slows down gets its burst back as it
 * would from ztunnel. Tokens are counted in billionths. Times are CLOCK_MONOTONIC
 * (bpf_ktime_get_ns); until_ns 0 is off. */
#define ZM_TOKEN 1000000000ULL
#define ZM_MAX_ELAPSED_NS 10000000000ULL

struct zm_throttle {
	__u64 until_ns;
	__u64 rate;      /* tokens per second */
	__u64 burst_nt;  /* bucket size, billionths of a token */
	__u64 tokens_nt; /* tokens held at last_ns, billionths */
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zm_throttle);
} zm_throttle SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&zm_counters, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

/* True when this connect is refused by the throttle. Two CPUs updating the bucket at
 * once may both take the same token; ztunnel's own quota check still applies to what
 * passes. */
static __always_inline int throttled(void)
{
	__u32 zero = 0;
	struct zm_throttle *t = bpf_map_lookup_elem(&zm_throttle, &zero);
	__u64 now, elapsed, tokens;

	if (!t || !t->until_ns)
		return 0;
	now = bpf_ktime_get_ns();
	if (now >= t->until_ns)
		return 0;
	elapsed = now > t->last_ns ? now - t->last_ns : 0;
	if (elapsed > ZM_MAX_ELAPSED_NS)
		elapsed = ZM_MAX_ELAPSED_NS;
	tokens = t->tokens_nt + elapsed * t->rate;
	if (tokens > t->burst_nt)
		tokens = t->burst_nt;
	t->last_ns = now;
	if (tokens >= ZM_TOKEN) {
		t->tokens_nt = tokens - ZM_TOKEN;
		return 0;
	}
	t->tokens_nt = tokens;
	count(3);
	return 1;
}

/* What to do with a connect: capture TCP; let UDP and ICMP (ping sockets) through,
 * since capture is TCP only; refuse any other transport (MPTCP at the socket level,
 * SCTP, ...) to a non-loopback address, so no stream protocol goes around ztunnel. */
enum verdict { PASS, CAPTURE, REFUSE };

static __always_inline enum verdict classify(struct bpf_sock_addr *ctx)
{
	switch (ctx->protocol) {
	case IPPROTO_TCP:
		return CAPTURE;
	case IPPROTO_UDP:
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		return PASS;
	default:
		return REFUSE;
	}
}

/* A socket connected to loopback after an earlier captured connect must not keep
 * reporting the old original destination. */
static __always_inline int forget(struct bpf_sock_addr *ctx)
{
	if (ctx->sk)
		bpf_sk_storage_delete(&zm_sock_dst, ctx->sk);
	return 1;
}

static __always_inline int remember(struct bpf_sock_addr *ctx, struct zm_dst *d)
{
	struct zm_dst *s;

	if (!ctx->sk)
		return 0;
	s = bpf_sk_storage_get(&zm_sock_dst, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return 0;
	*s = *d;
	count(1);
	return 1;
}

SEC("cgroup/connect4")
int zm_connect4(struct bpf_sock_addr *ctx)
{
	__u32 ip = bpf_ntohl(ctx->user_ip4);
	enum verdict v = classify(ctx);
	struct zm_dst d = {};

	if (v == PASS)
		return 1;
	/* Loopback and INADDR_ANY stay in the pod: in-pod traffic and ztunnel's own
	 * connections to the application. */
	if ((ip >> 24) == 127 || ip == 0)
		return forget(ctx);
	if (v == REFUSE || throttled())
		return 0;
	d.addr[0] = ctx->user_ip4;
	d.port = bpf_ntohs(ctx->user_port);
	d.family = 4;
	/* Fail closed: without a record ztunnel could not route it, so the connect is
	 * refused rather than let through uncaptured. */
	if (!remember(ctx, &d))
		return 0;
	ctx->user_ip4 = bpf_htonl(0x7f000001);
	ctx->user_port = bpf_htons(ZM_OUTBOUND_PORT);
	return 1;
}

SEC("cgroup/connect6")
int zm_connect6(struct bpf_sock_addr *ctx)
{
	__u32 a0 = ctx->user_ip6[0], a1 = ctx->user_ip6[1];
	__u32 a2 = ctx->user_ip6[2], a3 = ctx->user_ip6[3];
	enum verdict v = classify(ctx);
	struct zm_dst d = {};

	if (v == PASS)
		return 1;
	d.port = bpf_ntohs(ctx->user_port);
	if (a0 == 0 && a1 == 0 && a2 == bpf_htonl(0xffff)) {
		/* IPv4-mapped (RFC 4291 2.5.5.2): IPv4 on the wire. */
		__u32 ip = bpf_ntohl(a3);
		if ((ip >> 24) == 127 || ip == 0)
			return forget(ctx);
		if (v == REFUSE || throttled())
			return 0;
		d.addr[0] = a3;
		d.family = 4;
		d.mapped = 1;
		if (!remember(ctx, &d))
			return 0;
		ctx->user_ip6[3] = bpf_htonl(0x7f000001);
		ctx->user_port = bpf_htons(ZM_OUTBOUND_PORT);
		return 1;
	}
	if (a0 == 0 && a1 == 0 && a2 == 0 && (a3 == 0 || a3 == bpf_htonl(1)))
		return forget(ctx); /* :: and ::1 */
	if (v == REFUSE || throttled())
		return 0;
	d.addr[0] = a0;
	d.addr[1] = a1;
	d.addr[2] = a2;
	d.addr[3] = a3;
	d.family = 6;
	if (!remember(ctx, &d))
		return 0;
	ctx->user_ip6[0] = 0;
	ctx->user_ip6[1] = 0;
	ctx->user_ip6[2] = 0;
	ctx->user_ip6[3] = bpf_htonl(1);
	ctx->user_port = bpf_htons(ZM_OUTBOUND_PORT);
	return 1;
}

/* The local port is only known once the connect has bound one, which is when the
 * TCP_CONNECT callback runs (before the SYN leaves), so the record is re-keyed here. */
SEC("sockops")
int zm_sockops(struct bpf_sock_ops *skops)
{
	struct zm_key k = {};
	struct zm_dst *d;

	if (skops->op != BPF_SOCK_OPS_TCP_CONNECT_CB || !skops->sk)
		return 1;
	d = bpf_sk_storage_get(&zm_sock_dst, skops->sk, 0, 0);
	if (!d)
		return 1; /* not captured: loopback destination */
	k.netns_cookie = bpf_get_netns_cookie(skops);
	k.port = (__u16)skops->local_port;
	k.family = d->family;
	if (bpf_map_update_elem(&zm_orig_dst, &k, d, BPF_ANY))
		count(2);
	return 1;
}

static __always_inline struct zm_dst *captured(struct bpf_sock_addr *ctx)
{
	if (!ctx->sk)
		return 0;
	return bpf_sk_storage_get(&zm_sock_dst, ctx->sk, 0, 0);
}

SEC("cgroup/getpeername4")
int zm_getpeername4(struct bpf_sock_addr *ctx)
{
	struct zm_dst *d = captured(ctx);

	if (d && d->family == 4 && !d->mapped) {
		ctx->user_ip4 = d->addr[0];
		ctx->user_port = bpf_htons(d->port);
	}
	return 1;
}

SEC("cgroup/getpeername6")
int zm_getpeername6(struct bpf_sock_addr *ctx)
{
	struct zm_dst *d = captured(ctx);

	if (!d)
		return 1;
	if (d->mapped) {
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = d->addr[0];
	} else if (d->family == 6) {
		ctx->user_ip6[0] = d->addr[0];
		ctx->user_ip6[1] = d->addr[1];
		ctx->user_ip6[2] = d->addr[2];
		ctx->user_ip6[3] = d->addr[3];
	} else {
		return 1;
	}
	ctx->user_port = bpf_htons(d->port);
	return 1;
}

/* Strict inbound. Attached to the pod's cgroup, this runs only for packets delivered
 * to sockets the pod's processes own, never for ztunnel's sockets in the same netns
 * (its 15008 listener, its loopback connections to the application), so it needs no
 * port list: any TCP segment for an application socket that did not arrive on lo came
 * from outside the pod without going through ztunnel. */
SEC("cgroup_skb/ingress")
int zm_ingress(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;
	__u32 src[4] = {};

	if (skb->ifindex == LOOPBACK_IFINDEX || !sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->protocol != IPPROTO_TCP)
		return 1;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		src[2] = bpf_htonl(0xffff);
		if (bpf_skb_load_bytes(skb, 12, &src[3], 4))
			goto drop;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 8, src, 16))
			goto drop;
	}
	if (bpf_map_lookup_elem(&zm_exempt, src))
		return 1;
drop:
	count(0);
	return 0;
}

/* Sockets an enrolled pod may make (bpf/README.md, "Socket creation"): TCP and MPTCP streams,
 * which the connect hooks capture; UDP, ping (ICMP datagram) sockets and raw ICMP, which
 * capture lets pass as it does at connect. Every other inet socket -- UDP-Lite, whose
 * connect() never runs the cgroup connect hooks, SCTP, DCCP, raw IP of any other protocol --
 * could reach the network without the connect hooks deciding, so socket() fails with EPERM. */
#define ZM_SOCK_STREAM 1
#define ZM_SOCK_DGRAM 2
#define ZM_SOCK_RAW 3

SEC("cgroup/sock_create")
int zm_sock_create(struct bpf_sock *sk)
{
	__u32 proto = sk->protocol;

	switch (sk->type) {
	case ZM_SOCK_STREAM:
		return proto == IPPROTO_TCP || proto == IPPROTO_MPTCP;
	case ZM_SOCK_DGRAM:
		return proto == IPPROTO_UDP || proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6;
	case ZM_SOCK_RAW:
		return proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6;
	default:
		return 0;
	}
}

