/*
 * A stream joined with a table (`distributary/runner/table_joins.py`), on the JVM: per join key,
 * the table's rows (by record key), and each event joined with the rows its key has then. A
 * table's record puts its row under its record key, or removes it (a deletion, or a null join
 * key); an event is written with each row (a LEFT JOIN writes it alone when there is none). A
 * batch's records of a key are applied in time order (Kafka's timestamp), a table's change before
 * an event of the same instant, then by partition and offset. The rows are in the checkpoint's
 * state, so an event is joined and written exactly once, and a change of the table never writes
 * an earlier event again.
 *
 * Compiled by `distributary.jvm_operators` against Spark's own jars (pyspark's), and by the job
 * image's build.
 */
package dev.distributary.tables;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

public final class JoinRows extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    static final StructType RECORD_KEY = DataTypes.createStructType(
            new StructField[] {DataTypes.createStructField("k", DataTypes.StringType, true)});

    private final boolean left;
    private final StructType table;
    private final int side;
    private final int timestamp;
    private final int partition;
    private final int offset;
    private final int stream;
    private final int change;
    private transient MapState<Row, Row> rows;

    private JoinRows(StructType input, boolean left, StructType table, String side,
                     String timestamp, String partition, String offset, String stream,
                     String change) {
        this.left = left;
        this.table = table;
        this.side = input.fieldIndex(side);
        this.timestamp = input.fieldIndex(timestamp);
        this.partition = input.fieldIndex(partition);
        this.offset = input.fieldIndex(offset);
        this.stream = input.fieldIndex(stream);
        this.change = input.fieldIndex(change);
    }

    /**
     * Events and table records (`input`: the join key's columns `keys`, the side, 0 for a table's
     * change and 1 for an event, the time, partition and offset, the event's row in `stream` and
     * the change in `change`: its record key, deletion flag and the table's columns) joined;
     * `table` the table's row schema (JSON), `output` the schema written (the event's row and
     * the table's row).
     */
    public static Dataset<Row> apply(Dataset<Row> input, List<String> keys, boolean left,
                                     String table, String side, String timestamp,
                                     String partition, String offset, String stream,
                                     String change, String output) {
        JoinRows processor = new JoinRows(input.schema(), left,
                (StructType) DataType.fromJson(table), side, timestamp, partition, offset, stream,
                change);
        return Support.groupedBy(input, keys).transformWithState(processor, TimeMode.None(),
                OutputMode.Append(), Encoders.row((StructType) DataType.fromJson(output)));
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        rows = getHandle().getMapState("rows", Encoders.row(RECORD_KEY), Encoders.row(table),
                TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
            Row key, scala.collection.Iterator<Row> records, TimerValues timerValues) {
        boolean keyed = Support.keyed(key);
        List<Row> batch = new ArrayList<>();
        CollectionConverters.asJava(records).forEachRemaining(batch::add);
        batch.sort(inOrder());
        List<Row> written = new ArrayList<>();
        for (Row record : batch) {
            if (record.getInt(side) == 0) {
                apply(record.getStruct(change), keyed);
                continue;
            }
            Row event = record.getStruct(stream);
            boolean found = false;
            if (keyed) {
                for (Row value : (Iterable<Row>) () -> CollectionConverters.asJava(rows.values())) {
                    written.add(RowFactory.create(event, value));
                    found = true;
                }
            }
            if (!found && left) {
                written.add(RowFactory.create(event, null));
            }
        }
        return CollectionConverters.asScala(written.iterator());
    }

    /** By time, a table's change before an event of the same instant, then place. */
    private Comparator<Row> inOrder() {
        Comparator<Row> byTime =
                (a, b) -> Support.ORDER.compare(a.get(timestamp), b.get(timestamp));
        return byTime.thenComparingInt((Row r) -> r.getInt(side))
                .thenComparingInt((Row r) -> r.getInt(partition))
                .thenComparingLong((Row r) -> r.getLong(offset));
    }

    /** A table's change: its record key, its deletion flag, then the table's columns. */
    private void apply(Row change, boolean keyed) {
        Row record = RowFactory.create(change.getString(0));
        if (Support.flag(change, 1) || !keyed) {
            if (rows.containsKey(record)) {
                rows.removeKey(record);
            }
            return;
        }
        Object[] columns = new Object[change.length() - 2];
        for (int i = 0; i < columns.length; i++) {
            columns[i] = change.get(2 + i);
        }
        rows.updateValue(record, RowFactory.create(columns));
    }
}
