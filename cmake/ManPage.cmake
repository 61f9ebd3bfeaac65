# Writes the masque(1) man page from the program's own --help texts, so the page and --help
# never say different things. Run at build time:
#   cmake -DMASQUE=path/to/masque -DOUTPUT=masque.1 -DVERSION=x.y.z -P ManPage.cmake
# The commands are those the main --help lists under "Commands:".

function(roff_escape text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(help_of out)
  execute_process(COMMAND "${MASQUE}" ${ARGN} --help OUTPUT_VARIABLE text RESULT_VARIABLE code
                  ERROR_QUIET)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "masque ${ARGN} --help failed (${code})")
  endif()
  roff_escape("${text}" text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

help_of(main)
execute_process(COMMAND "${MASQUE}" --help OUTPUT_VARIABLE raw)
string(REGEX MATCH "Commands:\n(  [^\n]*\n)+" commands_block "${raw}")
string(REGEX MATCHALL "\n  [a-z][a-z-]* " command_lines "${commands_block}")
set(commands "")
foreach(line IN LISTS command_lines)
  string(STRIP "${line}" command)
  list(APPEND commands "${command}")
endforeach()
list(REMOVE_DUPLICATES commands)

set(page ".TH MASQUE 1 \"\" \"masque ${VERSION}\" \"User Commands\"
.SH NAME
masque \\- run Transformer language models over corpora
.SH SYNOPSIS
.B masque
\\fICOMMAND\\fR [\\fIOPTIONS\\fR]
.SH DESCRIPTION
The text of \\fBmasque \\-\\-help\\fR, then of \\fBmasque\\fR \\fICOMMAND\\fR \\fB\\-\\-help\\fR for
each command.
.PP
.nf
${main}
.fi
.SH COMMANDS
")
foreach(command IN LISTS commands)
  help_of(help ${command})
  string(APPEND page ".SS \"masque ${command}\"\n.nf\n${help}\n.fi\n")
endforeach()
string(APPEND page ".SH FILES
.TP
.I /usr/share/masque/pipelines
ready pipelines (their model paths point at ../shared; override them with \\-\\-set)
.TP
.I ${PLUGIN_DIR}
the plugins; more are searched in the absolute directories of \\fBMASQUE_PLUGIN_PATH\\fR
.SH SEE ALSO
The README and docs of the masque project.
")
file(WRITE "${OUTPUT}" "${page}")
