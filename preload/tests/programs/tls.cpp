// C++ thread_local objects with destructors (registered through __cxa_thread_atexit): each of 8
// threads' object mallocs in its constructor, and its destructor, run at the thread's exit,
// frees that, mallocs and frees, and leaks one 1357-byte block from tls_destructor_leak.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

void *volatile sink;

__attribute__((noinline)) void tls_destructor_leak() {
    void *p = std::malloc(1357);
    std::memset(p, 3, 1357);
    sink = p;
}

struct PerThread {
    char *buffer;
    std::string name;
    PerThread() : buffer(static_cast<char *>(std::malloc(512))), name(100, 'n') {
        std::memset(buffer, 1, 512);
    }
    ~PerThread() {
        std::free(buffer);
        delete new std::vector<int>(1000, 1);
        tls_destructor_leak();
    }
};

thread_local PerThread per_thread;

int main() {
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; i++)
        threads.emplace_back([] { per_thread.buffer[0] = 2; });
    for (auto &t : threads)
        t.join();
    std::printf("ok\n");
    return 0;
}
