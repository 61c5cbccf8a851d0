/* Force-included into host builds (ci.host), with this directory first on the system include path, so
 * their wheels meet the manylinux policy of the torch they link (manylinux_2_28 for torch >= 2.7) when
 * the build machine's glibc is newer.
 *
 * Three kinds of reference push an extension past glibc 2.28 in practice (measured):
 *  - glibc 2.29 gave exp/log/pow/exp2/log2 new symbol versions; the 2.2.5 versions are still in every
 *    x86_64 glibc and compute the same functions: bind to those (repeating a .symver is harmless, and
 *    nvcc's host pass does see this file twice);
 *  - glibc 2.34 moved the dl* functions from libdl into libc at GLIBC_2.34, keeping the 2.2.5 versions
 *    there as compatibility symbols; torch >= 2.14's stable headers call dlsym (macros.h). On an older
 *    glibc the 2.2.5 dlsym is libdl's, which libtorch (built on manylinux_2_28) always loads;
 *  - libstdc++ >= 11 reads glibc 2.32's __libc_single_threaded: see sys/single_threaded.h here.
 * Anything else still too new is named by ci.repair when auditwheel refuses the policy. */
#if defined(__x86_64__) && !defined(__CUDA_ARCH__)
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
__asm__(".symver exp2,exp2@GLIBC_2.2.5");
__asm__(".symver log2,log2@GLIBC_2.2.5");
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
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
 * type (CXXABI_1.3.8) every manylinux_2_28 libstdc++ has. */
#if defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11
#include <new>
namespace std {
[[noreturn]] __attribute__((weak, visibility("hidden"))) void __throw_bad_array_new_length() {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  throw bad_array_new_length();
#else
  __builtin_abort();  /* what libstdc++ does under -fno-exceptions */
#endif
}
}  // namespace std
#endif
#endif
#endif
