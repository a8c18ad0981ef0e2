/* Includes vqp.h twice (the include guard must hold) and uses a little of it; built as
 * C99 and as C++17 with -Wall -Wextra -Werror by tests/c_build.rs. */
#include "vqp.h"
#include "vqp.h"

#if VQP_VERSION != VQP_VERSION_MAJOR * 10000 + VQP_VERSION_MINOR * 100 + VQP_VERSION_PATCH
#error "VQP_VERSION does not add up"
#endif

int main(void) {
    struct vqp_settings s;
    vqp_status st = vqp_settings_init(&s, sizeof s);
    vqp_endpoint ep = {0};
    return st == VQP_OK && vqp_endpoint_destroy(ep) == VQP_ERR_NULL ? 0 : 1;
}
