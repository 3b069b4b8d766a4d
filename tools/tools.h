// tools.h: the subcommands of dflash_tool, one file each (tools/tool_<name>.c).
// Each takes the arguments after the subcommand name (argv[0] is the subcommand) and returns the
// process exit code: 0 on success, 1 on bad input (after printing one line naming the problem),
// 2 on a usage error.
#pragma once

int tool_inspect_main(int argc, char **argv);
int tool_convert_jsonl_main(int argc, char **argv);
int tool_teacher_dump_main(int argc, char **argv);
int tool_compare_main(int argc, char **argv);
int tool_make_target_main(int argc, char **argv);
int tool_step_dump_main(int argc, char **argv);
int tool_make_data_main(int argc, char **argv);
int tool_mem_check_main(int argc, char **argv);
