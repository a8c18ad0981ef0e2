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
