/* Force-included into host builds (ci.host), with this directory first on the system include path, so
 * their wheels meet the manylinux policy of the torch they link (manylinux_2_28 for torch >= 2.7) when
 * the build machine's glibc is newer.
 *
 * Three kinds of reference push an extension past glibc 2.28 in practice (measured):
 *  - glibc 2.29 gave exp/log/pow/exp2/log2 new symbol versions; the 2.2.5 versions are still in every
 *    x86_64 glibc and compute the same functions: bind to those (repeating a .symver is harmless, and
 *    nvcc's host pass does see this file twice);
 *  - glibc 2.34 moved libdl's and libpthread's functions into libc at GLIBC_2.34, keeping their old
 *    versions there as compatibility symbols; torch >= 2.14's stable headers call dlsym (macros.h),
 *    std::call_once calls pthread_once. On an older glibc those versions are libdl's and libpthread's,
 *    which libtorch (built on manylinux_2_28) always loads. (A library defining one of these itself, an
 *    interposer, cannot take this header.)
 *  - libstdc++ >= 11 reads glibc 2.32's __libc_single_threaded: see sys/single_threaded.h here.
 * Anything else still too new is named by ci.repair when auditwheel refuses the policy. */
#if defined(__x86_64__) && !defined(__CUDA_ARCH__)
#define CI_GLIBC_BIND(name, version) __asm__(".symver " #name "," #name "@" version)
CI_GLIBC_BIND(exp, "GLIBC_2.2.5");
CI_GLIBC_BIND(log, "GLIBC_2.2.5");
CI_GLIBC_BIND(pow, "GLIBC_2.2.5");
CI_GLIBC_BIND(exp2, "GLIBC_2.2.5");
CI_GLIBC_BIND(log2, "GLIBC_2.2.5");
/* libdl's, in libc since 2.34 */
CI_GLIBC_BIND(dlopen, "GLIBC_2.2.5");
CI_GLIBC_BIND(dlsym, "GLIBC_2.2.5");
CI_GLIBC_BIND(dlvsym, "GLIBC_2.2.5");
CI_GLIBC_BIND(dlclose, "GLIBC_2.2.5");
CI_GLIBC_BIND(dlerror, "GLIBC_2.2.5");
CI_GLIBC_BIND(dladdr, "GLIBC_2.2.5");
CI_GLIBC_BIND(dladdr1, "GLIBC_2.3.3");
CI_GLIBC_BIND(dlinfo, "GLIBC_2.3.3");
CI_GLIBC_BIND(dlmopen, "GLIBC_2.3.4");
/* libpthread's, in libc since 2.34: what libstdc++'s headers call inline (std::call_once, thread-local
 * keys, std::thread, std::shared_mutex) */
CI_GLIBC_BIND(pthread_once, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_key_create, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_key_delete, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_getspecific, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_setspecific, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_create, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_join, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_detach, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_mutex_trylock, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_init, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_destroy, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_rdlock, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_wrlock, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_tryrdlock, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_trywrlock, "GLIBC_2.2.5");
CI_GLIBC_BIND(pthread_rwlock_unlock, "GLIBC_2.2.5");
#undef CI_GLIBC_BIND
#endif

/* libstdc++ >= 9 exports some template members it once inlined (the default constructors of
 * std::ostringstream and std::stringstream: GLIBCXX_3.4.26; std::stringbuf::str() const& and &&:
 * GLIBCXX_3.4.29), and its headers declare them `extern template`, so code using them needs a
 * libstdc++ newer than manylinux_2_28's (GLIBCXX_3.4.25). torch's stable-ABI headers format every error
 * message that way. Without the extern declarations the compiler instantiates those members in the
 * library itself, and it references only what old libstdc++ versions export. nvcc reads this file in
 * its preprocessing pass (__NVCC__ defined) and again when compiling the preprocessed host code
 * (__CUDA_ARCH_LIST__ defined, __NVCC__ not), where libstdc++'s headers are already expanded inline:
 * including one again there would define everything twice, so that pass is skipped. */
#if defined(__cplusplus) && defined(__has_include) && !(defined(__CUDA_ARCH_LIST__) && !defined(__NVCC__))
#if __has_include(<bits/c++config.h>)
#include <bits/c++config.h>
#undef _GLIBCXX_EXTERN_TEMPLATE
#define _GLIBCXX_EXTERN_TEMPLATE 0
/* libstdc++ >= 11's allocators call std::__throw_bad_array_new_length() (exported at GLIBCXX_3.4.29)
 * when a size overflows; torch 2.14's stable headers get there through std::vector. A weak, hidden
 * definition here binds those calls inside the library; it throws what libstdc++'s own does, whose
 * type (CXXABI_1.3.8) every manylinux_2_28 libstdc++ has. Not under -fno-exceptions: there the calls
 * stay libstdc++'s (an abort), and a library that still references it is named by repair. */
#if defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11 && __cplusplus >= 201103L \
    && (defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#include <new>
namespace std {
/* declared here first, before libstdc++'s own (default-visibility) declaration could be */
__attribute__((noreturn, weak, visibility("hidden"))) void __throw_bad_array_new_length();
void __throw_bad_array_new_length() { throw bad_array_new_length(); }
}  // namespace std
#endif
#endif
#endif
