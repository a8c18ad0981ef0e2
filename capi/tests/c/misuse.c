/*
 * The C API misused, call by call: every misuse must return its error code, never
 * crash. Run by tests/c_api.rs plainly, under AddressSanitizer and under valgrind.
 * Needs VQP_IBVERBS_PATH naming softverbs' cdylib and VQP_SOFT_DIR (two devices).
 * Prints "misuse: N checks passed" and exits 0, or names the first check that failed.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */

#define TEST_NAME "misuse"
#include "common.h"

int main(void) {
    vqp_device none_dev = {0}, dev, dev1, garbage = {0x1234567890abcdefull};
    vqp_endpoint none_ep = {0}, a, b, garbage_ep = {0x1234567890abcdefull};
    vqp_mr none_mr = {0}, mr;
    struct vqp_settings s;
    struct vqp_mr_info mi;
    struct vqp_wc wc[4];
    uint32_t n = 0;
    char name[32];

    /* Status names, for every value. */
    checks++;
    if (strncmp(vqp_status_str(VQP_ERR_STALE_HANDLE), "VQP_ERR_STALE_HANDLE", 20) ||
        strcmp(vqp_status_str(-7), "unknown vqp status") || vqp_version() != VQP_VERSION) {
        fprintf(stderr, "misuse: status names or version wrong\n");
        return 1;
    }

    /* Null pointers and handles. */
    EXPECT(vqp_device_open(NULL, "soft0", NULL), VQP_ERR_NULL);
    EXPECT(vqp_device_close(none_dev), VQP_ERR_NULL);
    EXPECT(vqp_settings_init(NULL, sizeof s), VQP_ERR_NULL);
    EXPECT(vqp_endpoint_destroy(none_ep), VQP_ERR_NULL);
    EXPECT(vqp_mr_deregister(none_mr), VQP_ERR_NULL);
    EXPECT(vqp_poll(none_ep, wc, 4, &n), VQP_ERR_NULL);
    EXPECT(vqp_endpoint_cm_serve(none_ep, "127.0.0.1:18515", 100), VQP_ERR_NULL);
    EXPECT(vqp_endpoint_cm_dial(none_ep, "127.0.0.1:18515", 100), VQP_ERR_NULL);
    EXPECT(vqp_post_send(none_ep, NULL), VQP_ERR_NULL);
    EXPECT(vqp_post_recv(none_ep, NULL), VQP_ERR_NULL);
    EXPECT(vqp_device_name(garbage, name, sizeof name), VQP_ERR_WRONG_HANDLE);
    /* The last error's text is kept per thread, and it is never empty after a failure. */
    checks++;
    if (vqp_last_error_message(NULL, 0) == 0) {
        fprintf(stderr, "misuse: no message after a failure\n");
        return 1;
    }

    /* Wrong sizes. */
    EXPECT(vqp_settings_init(&s, sizeof s - 1), VQP_ERR_STRUCT_SIZE);
    EXPECT(vqp_settings_init(&s, sizeof s), VQP_OK);

    /* Bad names. */
    EXPECT(vqp_device_open("/nonexistent/libibverbs.so.1", NULL, &dev), VQP_ERR_LIBRARY);
    EXPECT(vqp_device_open(NULL, "no-such-device", &dev), VQP_ERR_NO_DEVICE);

    EXPECT(vqp_device_open(NULL, "soft0", &dev), VQP_OK);
    EXPECT(vqp_device_open(NULL, "soft1", &dev1), VQP_OK);
    EXPECT(vqp_device_name(dev, name, sizeof name), VQP_OK);
    checks++;
    if (strcmp(name, "soft0")) {
        fprintf(stderr, "misuse: device name %s\n", name);
        return 1;
    }
    EXPECT(vqp_device_name(dev, name, 0), VQP_ERR_TOO_SMALL);

    /* A handle of one type where another goes. */
    vqp_endpoint as_ep = {dev.handle};
    EXPECT(vqp_endpoint_destroy(as_ep), VQP_ERR_WRONG_HANDLE);
    EXPECT(vqp_endpoint_cm_dial(as_ep, "127.0.0.1:18515", 100), VQP_ERR_WRONG_HANDLE);
    EXPECT(vqp_endpoint_cm_serve(garbage_ep, "127.0.0.1:18515", 100), VQP_ERR_WRONG_HANDLE);

    /* Memory regions. */
    static unsigned char buf[1 << 16], dst[1 << 16];
    EXPECT(vqp_mr_register(dev, NULL, sizeof buf, VQP_ACCESS_LOCAL_WRITE, &mr), VQP_ERR_NULL);
    EXPECT(vqp_mr_register(dev, buf, 0, VQP_ACCESS_LOCAL_WRITE, &mr), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_mr_register(dev, buf, sizeof buf, 0x100, &mr), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_mr_register(dev, buf, sizeof buf, VQP_ACCESS_LOCAL_WRITE, &mr), VQP_OK);
    EXPECT(vqp_mr_query(mr, &mi), VQP_OK);
    EXPECT(vqp_mr_deregister(mr), VQP_OK);
    EXPECT(vqp_mr_deregister(mr), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_mr_query(mr, &mi), VQP_ERR_STALE_HANDLE);

    /* Settings out of range. */
    struct vqp_settings bad = s;
    bad.struct_size = 8;
    EXPECT(vqp_endpoint_create(&dev, 1, &bad, &a), VQP_ERR_STRUCT_SIZE);
    bad = s;
    bad.mode = 7;
    EXPECT(vqp_endpoint_create(&dev, 1, &bad, &a), VQP_ERR_INVALID_ARGUMENT);
    bad = s;
    bad.data_qps = 0;
    EXPECT(vqp_endpoint_create(&dev, 1, &bad, &a), VQP_ERR_INVALID_ARGUMENT);
    bad = s;
    bad.data_qps = VQP_MAX_DATA_QPS + 1;
    EXPECT(vqp_endpoint_create(&dev, 1, &bad, &a), VQP_ERR_CONFIG);
    bad = s;
    bad.max_outstanding = VQP_MAX_WQES * 2;
    EXPECT(vqp_endpoint_create(&dev, 1, &bad, &a), VQP_ERR_CONFIG);
    EXPECT(vqp_endpoint_create(&dev, 0, &s, &a), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_create(&dev, VQP_MAX_DEVICES + 1, &s, &a), VQP_ERR_INVALID_ARGUMENT);

    /* Out-of-order set-up: post and poll before connecting. */
    s.data_qps = 2;
    EXPECT(vqp_endpoint_create(&dev, 1, &s, &a), VQP_OK);
    EXPECT(vqp_endpoint_create(&dev1, 1, &s, &b), VQP_OK);
    struct vqp_recv_wr note = {.wr_id = 1};
    EXPECT(vqp_post_recv(a, &note), VQP_ERR_STATE);
    EXPECT(vqp_poll(a, wc, 4, &n), VQP_ERR_STATE);
    EXPECT(vqp_endpoint_qp_stats(a, 0, &(struct vqp_qp_stats){0}), VQP_ERR_STATE);

    /* RDMA-CM: null and bad addresses (an IP address and a port), each before anything
     * is loaded or sent; then librdmacm missing: its own code, and the endpoint is
     * unchanged. */
    EXPECT(vqp_endpoint_cm_serve(a, NULL, 100), VQP_ERR_NULL);
    EXPECT(vqp_endpoint_cm_dial(a, NULL, 100), VQP_ERR_NULL);
    EXPECT(vqp_endpoint_cm_dial(a, "127.0.0.1", 100), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_cm_dial(a, "localhost:18515", 100), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_cm_dial(a, "127.0.0.1:0", 100), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_cm_dial(a, "127.0.0.1:65536", 100), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_cm_serve(a, "", 100), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_cm_serve(a, "\xff\xfe:1", 100), VQP_ERR_INVALID_ARGUMENT);
    checks++;
    if (setenv("VQP_RDMACM_PATH", "/nonexistent/librdmacm.so.1", 1) != 0) {
        fprintf(stderr, "misuse: setenv failed\n");
        return 1;
    }
    EXPECT(vqp_endpoint_cm_serve(a, "127.0.0.1:18515", 100), VQP_ERR_LIBRARY);
    EXPECT(vqp_endpoint_cm_dial(a, "127.0.0.1:18515", 100), VQP_ERR_LIBRARY);
    {
        char msg[512];
        vqp_last_error_message(msg, sizeof msg);
        checks++;
        if (!strstr(msg, "/nonexistent/librdmacm.so.1")) {
            fprintf(stderr, "misuse: the message does not name the library: %s\n", msg);
            return 1;
        }
    }

    /* Cards: too small a buffer, garbage, then the real exchange. */
    uint8_t card_a[VQP_CARD_MAX], card_b[VQP_CARD_MAX];
    size_t la = 0, lb = 0;
    EXPECT(vqp_endpoint_card(a, card_a, 4, &la), VQP_ERR_TOO_SMALL);
    checks++;
    if (la <= 4 || la > VQP_CARD_MAX) {
        fprintf(stderr, "misuse: the needed card length %zu is not reported\n", la);
        return 1;
    }
    EXPECT(vqp_endpoint_card(a, card_a, sizeof card_a, &la), VQP_OK);
    EXPECT(vqp_endpoint_card(b, card_b, sizeof card_b, &lb), VQP_OK);
    uint8_t junk[64];
    memset(junk, 0xee, sizeof junk);
    EXPECT(vqp_endpoint_connect(a, junk, sizeof junk), VQP_ERR_CARD);
    EXPECT(vqp_endpoint_connect(a, card_b, lb / 2), VQP_ERR_CARD);
    EXPECT(vqp_endpoint_connect(a, NULL, lb), VQP_ERR_NULL);
    /* Still usable after refused cards. */
    EXPECT(vqp_endpoint_connect(a, card_b, lb), VQP_OK);
    EXPECT(vqp_endpoint_connect(b, card_a, la), VQP_OK);
    EXPECT(vqp_endpoint_connect(a, card_b, lb), VQP_ERR_STATE);
    EXPECT(vqp_endpoint_card(a, card_a, sizeof card_a, &la), VQP_ERR_STATE);
    EXPECT(vqp_endpoint_cm_serve(a, "127.0.0.1:18515", 100), VQP_ERR_STATE);
    EXPECT(vqp_endpoint_cm_dial(b, "127.0.0.1:18515", 100), VQP_ERR_STATE);

    /* Requests refused as written: nothing posted. */
    struct vqp_mr_info si, di;
    vqp_mr smr, dmr;
    EXPECT(vqp_mr_register(dev, buf, sizeof buf, VQP_ACCESS_LOCAL_WRITE, &smr), VQP_OK);
    EXPECT(vqp_mr_register(dev1, dst, sizeof dst,
                           VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE, &dmr),
           VQP_OK);
    EXPECT(vqp_mr_query(smr, &si), VQP_OK);
    EXPECT(vqp_mr_query(dmr, &di), VQP_OK);
    struct vqp_send_wr w = {.wr_id = 5, .opcode = VQP_WR_RDMA_WRITE, .flags = VQP_SEND_SIGNALED,
                            .local_addr = si.addr, .len = sizeof buf, .remote_addr = di.addr,
                            .key_mask = 1};
    w.keys[0].lkey = si.lkey;
    w.keys[0].rkey = di.rkey;
    struct vqp_send_wr x = w;
    x.opcode = 99;
    EXPECT(vqp_post_send(a, &x), VQP_ERR_REQUEST);
    x = w;
    x.len = 0;
    EXPECT(vqp_post_send(a, &x), VQP_ERR_REQUEST);
    x = w;
    x.key_mask = 0;
    EXPECT(vqp_post_send(a, &x), VQP_ERR_REQUEST);
    x = w;
    x.key_mask = 0x10;
    EXPECT(vqp_post_send(a, &x), VQP_ERR_INVALID_ARGUMENT);
    x = w;
    x.flags = 0;
    EXPECT(vqp_post_send(a, &x), VQP_ERR_REQUEST);
    x = w;
    x.flags |= VQP_SEND_INLINE;
    EXPECT(vqp_post_send(a, &x), VQP_ERR_REQUEST);
    EXPECT(vqp_poll(a, NULL, 4, &n), VQP_ERR_NULL);
    EXPECT(vqp_poll(a, wc, 4, NULL), VQP_ERR_NULL);
    EXPECT(vqp_endpoint_qp_stats(a, 2, &(struct vqp_qp_stats){0}), VQP_ERR_INVALID_ARGUMENT);

    /* One good write goes through, its bytes land. */
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 13);
    EXPECT(vqp_post_send(a, &w), VQP_OK);
    int done = 0;
    for (long spins = 0; !done && spins < 50000000; spins++) {
        EXPECT(vqp_poll(a, wc, 4, &n), VQP_OK);
        if (n > 0) {
            checks++;
            if (n != 1 || wc[0].wr_id != 5 || wc[0].status != VQP_WC_SUCCESS ||
                wc[0].byte_len != sizeof buf) {
                fprintf(stderr, "misuse: completion %u wr_id %llu status %u\n", n,
                        (unsigned long long)wc[0].wr_id, wc[0].status);
                return 1;
            }
            done = 1;
        }
    }
    checks++;
    if (!done || memcmp(buf, dst, sizeof buf)) {
        fprintf(stderr, "misuse: the write did not complete or its bytes differ\n");
        return 1;
    }
    /* Zero capacity polls nothing. */
    EXPECT(vqp_poll(a, NULL, 0, &n), VQP_OK);

    /* Calls after destroy: stale handles. */
    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_post_send(a, &w), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_poll(a, wc, 4, &n), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_endpoint_cm_serve(a, "127.0.0.1:18515", 100), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_endpoint_cm_dial(a, "127.0.0.1:18515", 100), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_endpoint_destroy(a), VQP_ERR_STALE_HANDLE);
    /* A new endpoint may reuse the slot; the old handle stays stale. */
    vqp_endpoint c;
    EXPECT(vqp_endpoint_create(&dev, 1, &s, &c), VQP_OK);
    EXPECT(vqp_post_recv(a, &note), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_post_recv(c, &note), VQP_ERR_STATE);

    /* A device closed under live objects: they keep it open; the handle is stale. */
    EXPECT(vqp_device_close(dev), VQP_OK);
    EXPECT(vqp_device_close(dev), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_mr_register(dev, buf, sizeof buf, VQP_ACCESS_LOCAL_WRITE, &mr),
           VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_endpoint_create(&dev, 1, &s, &a), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_mr_query(smr, &si), VQP_OK);

    EXPECT(vqp_endpoint_destroy(c), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
    EXPECT(vqp_mr_deregister(smr), VQP_OK);
    EXPECT(vqp_mr_deregister(dmr), VQP_OK);
    EXPECT(vqp_device_close(dev1), VQP_OK);
    printf("misuse: %d checks passed\n", checks);
    return 0;
}
