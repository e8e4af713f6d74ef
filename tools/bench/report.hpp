// pmhash-bench output: medians over repeats, ratio columns, table, JSON, CSV.
#pragma once

#include <string>
#include <vector>

#include "runner.hpp"

namespace pmhash::bench {

// Rows of R repeats of the same run (same sequence of rows) -> medians, with _min/_max of
// the throughput and recovery time.
std::vector<Row> median_rows(const std::vector<std::vector<Row>>& repeats);
// Adds vs_off (persistence-off) and vs_dram ratios to the "pm" rows.
void add_ratios(std::vector<Row>* rows);
// Lines describing count violations (issued != succeeded + failed, negative reads that
// succeeded, loaded keys not found); empty when the counts add up.
std::vector<std::string> count_violations(const std::vector<Row>& rows);

void print_table(const std::vector<Row>& rows, FILE* out);
std::string to_json(const std::vector<Row>& rows, const std::string& command,
                    const std::string& suite, int repeats);
std::string to_csv(const std::vector<Row>& rows);
std::string machine_summary();

}  // namespace pmhash::bench
