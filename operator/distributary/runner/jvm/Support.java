/*
 * What the views' JVM operators share (`distributary/runner/tables.py`, `joined_tables.py`,
 * `table_joins.py`): the key a batch's rows are grouped by, the output mode by its name, and an
 * order of SQL values as Spark's MIN and MAX order them.
 *
 * Compiled by `distributary.jvm_operators` against Spark's own jars (pyspark's), and by the job
 * image's build.
 */
package dev.distributary.tables;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

final class Support {
    private Support() {
    }

    static OutputMode mode(String name) {
        return "Update".equals(name) ? OutputMode.Update() : OutputMode.Append();
    }

    /**
     * `rows` grouped by the columns `columns` (as one row of them). No column: one group of
     * every row, keyed by a constant (a query without GROUP BY).
     */
    static KeyValueGroupedDataset<Row, Row> groupedBy(Dataset<Row> rows, List<String> columns) {
        StructType input = rows.schema();
        List<StructField> fields = new ArrayList<>();
        int[] indexes = new int[columns.size()];
        for (int i = 0; i < indexes.length; i++) {
            indexes[i] = input.fieldIndex(columns.get(i));
            fields.add(input.fields()[indexes[i]]);
        }
        if (fields.isEmpty()) {
            fields.add(DataTypes.createStructField("_dtry_all", DataTypes.IntegerType, false));
        }
        StructType key = DataTypes.createStructType(fields);
        return rows.groupByKey(new Columns(indexes), Encoders.row(key));
    }

    /** The key's parts, none of a constant key. */
    static Object[] parts(Row key, boolean constant) {
        if (constant) {
            return new Object[0];
        }
        Object[] found = new Object[key.length()];
        for (int i = 0; i < found.length; i++) {
            found[i] = key.get(i);
        }
        return found;
    }

    /** Whether no part of a key is null (SQL: a null key equals nothing). */
    static boolean keyed(Row key) {
        for (int i = 0; i < key.length(); i++) {
            if (key.isNullAt(i)) {
                return false;
            }
        }
        return true;
    }

    static Object[] values(Row row) {
        Object[] found = new Object[row.length()];
        for (int i = 0; i < found.length; i++) {
            found[i] = row.get(i);
        }
        return found;
    }

    static Object[] concat(Object[]... parts) {
        int size = 0;
        for (Object[] part : parts) {
            size += part.length;
        }
        Object[] joined = new Object[size];
        int at = 0;
        for (Object[] part : parts) {
            System.arraycopy(part, 0, joined, at, part.length);
            at += part.length;
        }
        return joined;
    }

    static boolean flag(Row record, int index) {
        return !record.isNullAt(index) && record.getBoolean(index);
    }

    /** Values of one SQL type in Spark's order: text by code point, bytes unsigned. */
    static final Comparator<Object> ORDER = Support::compare;

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static int compare(Object a, Object b) {
        if (a instanceof String x && b instanceof String y) {
            return Arrays.compare(x.codePoints().toArray(), y.codePoints().toArray());
        }
        if (a instanceof byte[] x && b instanceof byte[] y) {
            return Arrays.compareUnsigned(x, y);
        }
        return ((Comparable) a).compareTo(b);
    }

    /** The columns at `indexes` of a row, as a row (or the constant key). */
    private static final class Columns implements MapFunction<Row, Row> {
        private static final long serialVersionUID = 1L;
        private final int[] indexes;

        Columns(int[] indexes) {
            this.indexes = indexes;
        }

        @Override
        public Row call(Row record) {
            if (indexes.length == 0) {
                return RowFactory.create(0);
            }
            Object[] key = new Object[indexes.length];
            for (int i = 0; i < key.length; i++) {
                key[i] = record.get(indexes[i]);
            }
            return RowFactory.create(key);
        }
    }
}
