// Includes vqp.hpp (and with it vqp.h) twice; built as C++17 with -Wall -Wextra
// -Werror by tests/c_api.rs. A failed set-up call throws vqp::error with its code; a
// null endpoint's data-path call returns its status without throwing.
#include "vqp.hpp"
#include "vqp.hpp"

#include <cstdio>

int main() {
    vqp::settings s;
    if (s.struct_size != sizeof(vqp_settings) || s.data_qps == 0)
        return 1;
    try {
        vqp::device d("soft0", "/nonexistent/libibverbs.so.1");
        return 2;
    } catch (const vqp::error &e) {
        if (e.code() != VQP_ERR_LIBRARY)
            return 3;
        std::printf("threw: %s\n", e.what());
    }
    vqp_send_wr wr{};
    vqp::status st = vqp_post_send(vqp_endpoint{}, &wr);
    if (st.ok() || st.code() != VQP_ERR_NULL)
        return 4;
    return 0;
}

// The wrapper's every member is instantiated (compile-time check only).
[[maybe_unused]] static void members(vqp::endpoint &ep, vqp::app &a, vqp::device &d) {
    vqp_wc wc[4];
    vqp_event ev[4];
    std::uint8_t buf[8];
    vqp::memory_region mr(d, buf, VQP_ACCESS_LOCAL_WRITE);
    std::array<std::uint8_t, VQP_FAILBACK_LEN> m = ep.offer_rejoin(0), r{};
    (void)ep.on_failback(m, r);
    (void)ep.apply_event(0, vqp_async_event{});
    (void)ep.failover();
    (void)ep.qp_stats(0);
    (void)ep.poll(wc);
    (void)ep.post_send(vqp_send_wr{});
    (void)ep.post_send_inline(vqp_send_wr{}, vqp::span<const std::uint8_t>(buf, 8));
    (void)ep.post_recv(vqp_recv_wr{});
    (void)ep.card();
    ep.cm_serve("127.0.0.1:18515", 1);
    ep.cm_dial("127.0.0.1:18515", 1);
    (void)a.send(vqp_send_wr{});
    (void)a.recv(vqp_recv_wr{});
    (void)a.poll(ev);
    (void)a.stop(0);
    vqp::poller_config pc;
    vqp::app other(ep, pc);
    (void)d.name();
    (void)mr.rkey();
}
