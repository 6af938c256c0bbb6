// A C++ program driven by its stdin, for memprof attach: "leak" leaks 37 nodes of 1500 bytes made
// by new at leak_site and prints "leaked N"; "alive" prints "alive"; the end of stdin ends it.
// Two threads build and drop strings and vectors all the time.
#include <atomic>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

struct Node {
    char bytes[1500];
};

static std::vector<Node *> kept;

__attribute__((noinline)) Node *leak_site() {
    return new Node(); // LEAK_LINE
}

int main() {
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; t++) {
        threads.emplace_back([&stop] {
            while (!stop.load()) {
                std::vector<std::string> words;
                for (int i = 0; i < 64; i++) words.push_back(std::string(40 + i, 'x'));
                std::this_thread::sleep_for(std::chrono::microseconds(300));
            }
        });
    }
    std::cout << "ready" << std::endl;
    std::string line;
    int leaks = 0;
    while (std::getline(std::cin, line)) {
        if (line == "leak") {
            for (int i = 0; i < 37; i++) kept.push_back(leak_site());
            std::cout << "leaked " << ++leaks << std::endl;
        } else if (line == "alive") {
            std::cout << "alive" << std::endl;
        }
    }
    stop = true;
    for (auto &t : threads) t.join();
    std::cout << "bye" << std::endl;
}
