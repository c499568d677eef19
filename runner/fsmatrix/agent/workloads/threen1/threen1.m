threen1 ; 3n+1 benchmark: worker processes share sequence lengths through the database
 ;
 ; Parent:  mumps -run main^threen1 START END WORKERS BLOCK KEYS
 ;   KEYS is "spelled" (numbers as digit words, the published form) or "integer".
 ;   Environment: threen1_words = file with the ten digit words (digit 0 first, "#" lines ignored),
 ;                threen1_pids  = file the parent appends "worker <i> <pid>" lines to as it starts them,
 ;                threen1_jobdir = directory for the workers' output and error files.
 ;   Output (stdout), one record a line, "name key=value ...":
 ;     worker id=.. pid=.. reads=.. updates=.. longest=.. largest=.. cpu_cs=.. start_us=.. end_us=..
 ;            tp=.. tp_result=.. tp_highest=.. tp_rw=..
 ;     result workers=.. elapsed_us=.. reads=.. updates=.. longest=.. largest=.. start_skew_us=..
 ;     shared longest=.. largest=.. reads=.. updates=..
 ;   start_us/end_us are microseconds after the parent released the workers. "worker" and "result"
 ;   are each worker's own counts and their sums; "shared" is what the database holds at the end.
 ;
 ; Globals: ^step(number)=sequence length (both spelled in "spelled" mode);
 ;   ^result = longest sequence, ^highest = largest number, ^reads/^updates = the workers' totals
 ;   (plain integers in both modes); ^ctl = coordination.
 ;
 ; Shared results, as the published program keeps them: for every number whose sequence a worker
 ; had to compute, one TP transaction reads ^result and sets it only if this sequence is longer, so
 ; almost all of them are read-only; at its end each worker adds its counts to ^reads/^updates in
 ; one transaction. Departure: ^highest is kept in that same per-number transaction (the published
 ; program only sets it in each worker's final one), so that a crash loses neither answer for the
 ; sequences already stored: each transaction commits before its ^step entries are set. It makes
 ; a transaction read-write whenever a sequence climbs above ^highest without being the longest.
 ; Nothing here clears ^step, ^result or ^highest: a run on a database that holds them goes on
 ; from what is stored.
 ;
 quit
 ;
main ; parent: prepare the database, start the workers, time them, report
 new start,end,workers,block,keys,i,pid,cmd,jobdir,pidfile,t0,rec,err
 new reads,updates,longest,largest,cpu,first,last,us
 set $etrap="use $principal write ""%THREEN1-E-ERROR "",$zstatus,! zhalt 3"
 set start=$piece($zcmdline," ",1),end=$piece($zcmdline," ",2)
 set workers=$piece($zcmdline," ",3),block=$piece($zcmdline," ",4),keys=$piece($zcmdline," ",5)
 if (start'?1.N)!(end'?1.N)!(workers'?1.N)!(block'?1.N)!(start<1)!(end<start)!(workers<1)!(block<1) do  zhalt 2
 . write "%THREEN1-E-USAGE main^threen1 START END WORKERS BLOCK spelled|integer",!
 if (keys'="spelled")&(keys'="integer") write "%THREEN1-E-KEYS keys must be spelled or integer",! zhalt 2
 set jobdir=$ztrnlnm("threen1_jobdir"),pidfile=$ztrnlnm("threen1_pids")
 if (jobdir="")!(pidfile="") write "%THREEN1-E-ENV threen1_jobdir and threen1_pids must be set",! zhalt 2
 ; per-run state only: the computation's state (^step, ^result, ^highest) stays
 kill ^ctl,^reads,^updates
 do loadwords($ztrnlnm("threen1_words"))
 do setup(keys)
 ; 1 is the end of every sequence: stored with length 0, so reaching 1 is an ordinary database hit
 set ^step($$key(1))=$$val(0)
 set ^ctl("next")=0,^ctl("ready")=0
 ; the workers wait on this lock until every one of them is running
 lock +^ctl("go")
 for i=1:1:workers do
 . ; JOB parameters must be literal strings: build the whole JOB argument and use indirection
 . set cmd="work^threen1("_start_","_end_","_block_","""_keys_""","_i_")"
 . set cmd=cmd_":(output="""_jobdir_"/worker"_i_".mjo"":error="""_jobdir_"/worker"_i_".mje"")"
 . set cmd=cmd_":60"
 . job @cmd
 . else  write "%THREEN1-E-JOB could not start worker ",i,! zhalt 4
 . set pid(i)=$zjob
 . open pidfile:(append) use pidfile write "worker ",i," ",$zjob,! close pidfile use $principal
 ; wait until every worker holds its "work" lock and waits for the start signal
 for  quit:^ctl("ready")=workers  do  hang 0.002
 . for i=1:1:workers if '$zgetjpi(pid(i),"ISPROCALIVE"),'$data(^ctl("isready",i)) do  zhalt 5
 .. write "%THREEN1-E-WORKER worker ",i," (pid ",pid(i),") died before it was ready: see ",jobdir,"/worker",i,".mje",!
 set t0=$zhorolog
 lock -^ctl("go")
 ; each worker holds ^ctl("work",i) until it has finished: acquiring it means that worker is done
 for i=1:1:workers lock +^ctl("work",i) lock -^ctl("work",i)
 set us=$$us(t0),(reads,updates,longest,largest,cpu,first)=0,last=-1,err=0
 for i=1:1:workers do
 . set rec=$get(^ctl("done",i))
 . if rec="" set err=err+1 write "%THREEN1-E-WORKER worker ",i," did not finish: ",$get(^ctl("error",i),"no error recorded"),! quit
 . write "worker id=",i," pid=",$piece(rec,"^",1)," reads=",$piece(rec,"^",2)," updates=",$piece(rec,"^",3)
 . write " longest=",$piece(rec,"^",4)," largest=",$piece(rec,"^",5)," cpu_cs=",$piece(rec,"^",6)
 . write " start_us=",$piece(rec,"^",7)-us," end_us=",$piece(rec,"^",8)-us
 . write " tp=",$piece(rec,"^",9)," tp_result=",$piece(rec,"^",10)," tp_highest=",$piece(rec,"^",11)
 . write " tp_rw=",$piece(rec,"^",12),!
 . set reads=reads+$piece(rec,"^",2),updates=updates+$piece(rec,"^",3)
 . set:$piece(rec,"^",4)>longest longest=$piece(rec,"^",4)
 . set:$piece(rec,"^",5)>largest largest=$piece(rec,"^",5)
 . set:$piece(rec,"^",7)-us>first first=$piece(rec,"^",7)-us
 . set:$piece(rec,"^",8)-us>last last=$piece(rec,"^",8)-us
 if err zhalt 6
 write "result workers=",workers," elapsed_us=",last," reads=",reads," updates=",updates
 write " longest=",longest," largest=",largest," start_skew_us=",first,!
 write "shared longest=",+$get(^result)," largest=",+$get(^highest)
 write " reads=",+$get(^reads)," updates=",+$get(^updates),!
 quit
 ;
work(start,end,block,keys,id) ; worker: claim blocks of starting numbers until the range is exhausted
 new reads,updates,longest,largest,blk,n,last,t1,t2,stack,spelled,tp,tpresult,tphighest,tprw
 set $etrap="set ^ctl(""error"",id)=$zstatus halt"
 lock +^ctl("work",id):60
 else  set ^ctl("error",id)="could not get the work lock" quit
 set ^ctl("pid",id)=$job
 do loadwords(""),setup(keys)
 set ^ctl("isready",id)=1
 if $increment(^ctl("ready"))
 ; wait for the parent's start signal
 lock +^ctl("go")
 lock -^ctl("go")
 set t1=$zhorolog,(reads,updates,longest,largest,tp,tpresult,tphighest,tprw)=0,spelled=(keys="spelled")
 for  set blk=$increment(^ctl("next")),n=start+((blk-1)*block) quit:n>end  do
 . set last=n+block-1 set:last>end last=end
 . if spelled for n=n:1:last do onespelled(n)
 . if 'spelled for n=n:1:last do oneinteger(n)
 ; this worker's counts into the shared totals, in one transaction (a restart redoes all of it)
 ; (SET, not IF: an IF would skip ^updates after a worker that read nothing)
 tstart ()
 set t2=$increment(^reads,reads),t2=$increment(^updates,updates)
 set:largest>$get(^highest) ^highest=largest
 tcommit
 set t2=$zhorolog
 set ^ctl("done",id)=$job_"^"_reads_"^"_updates_"^"_longest_"^"_largest_"^"_$zgetjpi("","CPUTIM")_"^"_$$us(t1)_"^"_$$us(t2)_"^"_tp_"^"_tpresult_"^"_tphighest_"^"_tprw
 lock -^ctl("work",id)
 quit
 ;
oneinteger(n) ; the sequence of n with plain numeric subscripts and values
 new x,v,sp,len,top
 set x=n,sp=0,top=n
 ; walk until a number whose length the database knows, stacking the unknown ones
 for  set v=$get(^step(x)),reads=reads+1 quit:v'=""  set sp=sp+1,stack(sp)=x,x=$select(x#2:3*x+1,1:x/2) set:x>top top=x
 set len=v
 if sp do shared(len+sp,top)
 for sp=sp:-1:1 set len=len+1,^step(stack(sp))=len,updates=updates+1
 set:len>longest longest=len
 set:top>largest largest=top
 quit
 ;
onespelled(n) ; the same walk with every subscript and value spelled in digit words
 new x,v,sp,len,top
 set x=n,sp=0,top=n
 for  set v=$get(^step($$spell(x))),reads=reads+1 quit:v'=""  set sp=sp+1,stack(sp)=x,x=$select(x#2:3*x+1,1:x/2) set:x>top top=x
 set len=$$unspell(v)
 if sp do shared(len+sp,top)
 for sp=sp:-1:1 set len=len+1,^step($$spell(stack(sp)))=$$spell(len),updates=updates+1
 set:len>longest longest=len
 set:top>largest largest=top
 quit
 ;
shared(len,top) ; a computed sequence: its length and highest number into ^result/^highest
 ; Committed before the sequence's ^step entries are set, so whatever a crash leaves in ^step is
 ; already accounted for in ^result and ^highest. The flags are set inside the transaction and
 ; counted after it: a restart runs the body again from TSTART.
 new r,h
 tstart ()
 set (r,h)=0
 if len>$get(^result) set ^result=len,r=1
 if top>$get(^highest) set ^highest=top,h=1
 tcommit
 set tp=tp+1,tpresult=tpresult+r,tphighest=tphighest+h set:r!h tprw=tprw+1
 quit
 ;
survey ; what a crashed run left, read only: "survey entries=.. started=.. result=.. highest=.."
 ; $zcmdline: START END KEYS. entries: ^step entries; started: starting numbers START..END that
 ; have one (their sequences need no computing again); result/highest: ^result and ^highest.
 ; The digit words come from the file $ztrnlnm("threen1_words") into locals: nothing is written.
 new start,end,keys,n,x,entries,started,line,d,file
 set $etrap="use $principal write ""%THREEN1-E-ERROR "",$zstatus,! zhalt 3"
 set start=$piece($zcmdline," ",1),end=$piece($zcmdline," ",2),keys=$piece($zcmdline," ",3)
 set file=$ztrnlnm("threen1_words"),d=0
 open file:(readonly) use file
 for  read line quit:$zeof  if line'="",$extract(line)'="#" set word(d)=line,digit(line)=d,d=d+1
 close file use $principal
 do setup(keys)
 set entries=0,x="" for  set x=$order(^step(x)) quit:x=""  set entries=entries+1
 set started=0 for n=start:1:end set:$data(^step($$key(n))) started=started+1
 write "survey entries=",entries," started=",started," result=",+$get(^result)," highest=",+$get(^highest),!
 quit
 ;
peek ; stdin: one ^step subscript a line (digit words or a number); stdout: "1 <value>" or "0"
 ; The caller spells the subscripts itself, so the check does not rely on $$spell.
 new line
 for  read line quit:$zeof  write $data(^step(line))#2," ",$get(^step(line)),!
 quit
 ;
spell(x) ; 27 -> "deux सात": each digit as its word, separated by single spaces
 new s,i
 set s=word($extract(x))
 for i=2:1:$length(x) set s=s_" "_word($extract(x,i))
 quit s
 ;
unspell(s) ; "deux सात" -> 27
 new x,i
 set x=""
 for i=1:1:$length(s," ") set x=x_digit($piece(s," ",i))
 quit +x
 ;
key(x) ; a number as the database sees it in the current mode
 quit $select(mode="spelled":$$spell(x),1:x)
 ;
val(x) ; a sequence length as stored in the current mode
 quit $select(mode="spelled":$$spell(x),1:x)
 ;
us(h) ; $ZHOROLOG -> microseconds
 quit ($piece(h,",",1)*86400+$piece(h,",",2))*1000000+$piece(h,",",3)
 ;
loadwords(file) ; the ten digit words: from FILE into ^ctl("word") (parent), or from ^ctl (workers)
 new line,d,io
 if file'="" do
 . set io=$io,d=0
 . if $zsearch(file)="" write "%THREEN1-E-WORDS cannot find the digit words file ",file,! zhalt 2
 . open file:(readonly)
 . use file
 . for  read line quit:$zeof  if line'="",$extract(line)'="#" set ^ctl("word",d)=line,d=d+1
 . close file use io
 . if d'=10 write "%THREEN1-E-WORDS ",file," holds ",d," digit words, not 10",! zhalt 2
 kill word,digit
 for d=0:1:9 set word(d)=^ctl("word",d),digit(word(d))=d
 quit
 ;
setup(keys) ; remember the key mode for $$key/$$val
 set mode=keys
 quit
