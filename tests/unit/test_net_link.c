/* net_link (src/net/net_link.c): two links in one process over loopback on
 * the default provider (tcp;ofi_rxm): the bytes received equal those sent
 * (1 B .. the whole 4 MiB buffer, tags kept, an answer back), a receive
 * with nobody sending times out, a large send nobody takes times out (and
 * is cancelled) and the link still works afterwards, an unknown provider is
 * refused naming it.
 *
 * Each link is driven from one thread, as the contract says: the receiving
 * side runs in a thread of its own where both must make progress. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/net/net_link.h"
#include "../../src/util/util.h"

#define BUF (4u << 20)

static void quiet(void)
{
	log_set_level(LOG_ERROR);
}

TestSuite(net_link, .init = quiet);

static struct net_link *open_link(void)
{
	char err[512] = "";
	struct net_link *l = net_link_open(NULL, BUF, BUF, err, sizeof(err));
	cr_assert(l, "net_link_open: %s", err);
	return l;
}

static uint64_t peer_of(struct net_link *from, struct net_link *to)
{
	uint8_t a[256];
	size_t n = 0;
	cr_assert_eq(net_link_addr(to, a, sizeof(a), &n), 0);
	uint64_t p = 0;
	char err[512] = "";
	cr_assert_eq(net_link_peer(from, a, n, &p, err, sizeof(err)), 0, "%s", err);
	return p;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

struct rx_arg {
	struct net_link *l;
	size_t count;              /* messages to take */
	uint8_t *got;              /* the bytes of each, one after another */
	size_t *len;
	uint64_t *tag;
	int rc;
};

static void *rx_main(void *arg)
{
	struct rx_arg *a = arg;
	size_t off = 0;
	for (size_t i = 0; i < a->count; i++) {
		const void *b;
		a->rc = net_link_recv(a->l, &b, &a->len[i], &a->tag[i], 30.0);
		if (a->rc)
			return NULL;
		memcpy(a->got + off, b, a->len[i]);
		off += a->len[i];
	}
	return NULL;
}

Test(net_link, bytes_equal)
{
	struct net_link *tx = open_link(), *rx = open_link();
	uint64_t to = peer_of(tx, rx);
	cr_assert_eq(peer_of(tx, rx), to, "the same address gives the same peer");
	static const size_t sizes[] = { 1, 100, 4096, 65537, 1u << 20, BUF };
	size_t total = 0, k = sizeof(sizes) / sizeof(sizes[0]);
	for (size_t i = 0; i < k; i++)
		total += sizes[i];
	uint8_t *want = malloc(total), *got = calloc(1, total);
	size_t len[8] = { 0 };
	uint64_t tag[8] = { 0 };
	struct rx_arg a = { .l = rx, .count = k, .got = got, .len = len, .tag = tag };
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, rx_main, &a), 0);
	size_t off = 0;
	for (size_t i = 0; i < k; i++) {
		fill(want + off, sizes[i], (uint32_t)i + 7);
		memcpy(net_link_send_buf(tx), want + off, sizes[i]);
		cr_assert_eq(net_link_send(tx, to, 0x1000 + i, sizes[i], 30.0), 0, "send %zu", i);
		off += sizes[i];
	}
	pthread_join(th, NULL);
	cr_assert_eq(a.rc, 0, "recv: %s", strerror(-a.rc));
	for (size_t i = 0; i < k; i++) {
		cr_assert_eq(len[i], sizes[i], "message %zu: %zu bytes, sent %zu", i, len[i], sizes[i]);
		cr_assert_eq(tag[i], 0x1000 + i, "message %zu's tag", i);
	}
	cr_assert(memcmp(got, want, total) == 0, "the bytes received differ from those sent");
	/* an answer back on the other pair of buffers */
	uint64_t back = peer_of(rx, tx);
	memcpy(net_link_send_buf(rx), "complete", 9);
	cr_assert_eq(net_link_send(rx, back, 7, 9, 30.0), 0);
	const void *b;
	size_t n;
	uint64_t t;
	cr_assert_eq(net_link_recv(tx, &b, &n, &t, 30.0), 0);
	cr_assert(n == 9 && t == 7 && memcmp(b, "complete", 9) == 0);
	free(want);
	free(got);
	net_link_close(tx);
	net_link_close(rx);
}

Test(net_link, timeouts_when_nobody_answers)
{
	struct net_link *tx = open_link(), *rx = open_link();
	uint64_t to = peer_of(tx, rx);
	const void *b;
	size_t n;
	uint64_t t;
	double t0 = now_s();
	cr_assert_eq(net_link_recv(tx, &b, &n, &t, 0.3), -ETIMEDOUT, "nothing was sent to tx");
	cr_assert(now_s() - t0 >= 0.29, "the receive waited its timeout");
	/* 4 MiB to a link that never receives (nor makes progress): the
	 * provider cannot complete it, so the send times out */
	fill(net_link_send_buf(tx), BUF, 3);
	t0 = now_s();
	cr_assert_eq(net_link_send(tx, to, 1, BUF, 0.5), -ETIMEDOUT);
	cr_assert(now_s() - t0 < 30.0, "the send returned on its timeout");
	net_link_close(tx);
	net_link_close(rx);
	/* fresh links still move bytes */
	tx = open_link();
	rx = open_link();
	to = peer_of(tx, rx);
	memcpy(net_link_send_buf(tx), "x", 1);
	size_t len[1];
	uint64_t tag[1];
	uint8_t got[1];
	struct rx_arg a = { .l = rx, .count = 1, .got = got, .len = len, .tag = tag };
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, rx_main, &a), 0);
	cr_assert_eq(net_link_send(tx, to, 2, 1, 30.0), 0);
	pthread_join(th, NULL);
	cr_assert(a.rc == 0 && len[0] == 1 && got[0] == 'x' && tag[0] == 2);
	net_link_close(tx);
	net_link_close(rx);
}

Test(net_link, unknown_provider_named)
{
	char err[512] = "";
	struct net_link *l = net_link_open("no-such-provider", BUF, BUF, err, sizeof(err));
	cr_assert_null(l);
	cr_assert(strstr(err, "no-such-provider") && strstr(err, "[net] provider"), "%s", err);
}
